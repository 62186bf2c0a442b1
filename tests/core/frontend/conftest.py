"""Helpers for frontend tests: build small ONNX models and compare import + evaluate with ONNX Runtime."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from core.frontend import import_onnx
from core.graph.interpret import evaluate

MODELS_DIR = Path(__file__).resolve().parents[3] / ".." / "shared" / "models"

_ELEM = {np.dtype(k): v for k, v in {"float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE,
                                     "int64": TensorProto.INT64, "int32": TensorProto.INT32,
                                     "bool": TensorProto.BOOL, "uint8": TensorProto.UINT8}.items()}


def elem_type(dtype) -> int:
    return _ELEM[np.dtype(dtype)]


def make_model(nodes: Sequence[onnx.NodeProto], inputs: Mapping[str, tuple], outputs: Mapping[str, str],
               opset: int = 17, initializers: Mapping[str, np.ndarray] | None = None,
               domains: Mapping[str, int] | None = None) -> onnx.ModelProto:
    """inputs: name -> (dtype, shape); outputs: name -> dtype (shape left to inference) or (dtype, shape)."""
    outputs = {n: o if isinstance(o, tuple) else (o, None) for n, o in outputs.items()}
    graph = helper.make_graph(
        list(nodes), "test",
        [helper.make_tensor_value_info(n, elem_type(d), s) for n, (d, s) in inputs.items()],
        [helper.make_tensor_value_info(n, elem_type(d), s) for n, (d, s) in outputs.items()],
        [onnx.numpy_helper.from_array(np.asarray(v), n) for n, v in (initializers or {}).items()],
    )
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in (domains or {}).items()]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = helper.find_min_ir_version_for(opsets, ignore_unknown=True)
    # The checker wants a shape on every graph output: let ONNX shape inference fill them in.
    inferred = onnx.shape_inference.infer_shapes(model)
    for output in model.graph.output:
        match = next((o for o in inferred.graph.output if o.name == output.name), None)
        if match is not None and match.type.tensor_type.HasField("shape"):
            output.type.CopyFrom(match.type)
        elif not output.type.tensor_type.HasField("shape"):
            output.type.tensor_type.shape.SetInParent()
    return model


def model_of_values(nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
                    outputs: Sequence[onnx.ValueInfoProto], opset: int = 17) -> onnx.ModelProto:
    """A checked model from ready-made value infos (sequence/optional types included, unlike make_model)."""
    model = helper.make_model(helper.make_graph(list(nodes), "m", list(inputs), list(outputs)),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8  # what ONNX Runtime reads
    onnx.checker.check_model(model)
    return model


def random_feeds(model: onnx.ModelProto, seed: int = 0, shapes: Mapping[str, tuple] | None = None) -> dict:
    rng = np.random.default_rng(seed)
    initializers = {t.name for t in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        shape = (shapes or {}).get(value.name) or tuple(d.dim_value for d in tensor.shape.dim)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        if dtype.kind == "f":
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[value.name] = rng.random(shape) < 0.5
        else:
            feeds[value.name] = rng.integers(-5, 6, shape).astype(dtype)
    return feeds


def run_ort(model: onnx.ModelProto | Path, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    source = str(model) if isinstance(model, Path) else model.SerializeToString()
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    return session.run(None, dict(feeds))


def assert_matches_ort(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray] | None = None, *,
                       rtol: float = 1e-5, atol: float = 1e-5, input_shapes=None, seed: int = 0):
    """Imports `model`, runs the reference interpreter and ONNX Runtime on the same inputs, compares."""
    feeds = dict(feeds) if feeds is not None else random_feeds(model, seed, input_shapes)
    graph = import_onnx(model, input_shapes=input_shapes)
    ours = evaluate(graph, feeds)
    theirs = run_ort(model, feeds)
    assert list(ours) == [o.name for o in model.graph.output]
    for (name, got), expected in zip(ours.items(), theirs):
        assert got.shape == expected.shape, f"{name}: shape {got.shape} != ORT {expected.shape}"
        assert got.dtype == expected.dtype, f"{name}: dtype {got.dtype} != ORT {expected.dtype}"
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, err_msg=name)
    return graph


@pytest.fixture
def onnx_model():
    return make_model


@pytest.fixture
def check_ort():
    return assert_matches_ort


@pytest.fixture
def ort_runner():
    return run_ort


@pytest.fixture
def models_dir() -> Path:
    return MODELS_DIR
