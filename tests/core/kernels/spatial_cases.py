"""Helpers for the spatial-op kernel tests: compile a one-node ONNX model with Kiln and compare with ONNX Runtime."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from core.onnx_backend.backend import KilnBackend


def one_node_model(node: onnx.NodeProto, inputs: Mapping[str, np.ndarray], constants: Mapping[str, np.ndarray],
                   opset: int) -> onnx.ModelProto:
    """`inputs` become graph inputs, `constants` initializers; output types come from shape inference."""
    def info(name, array):
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape)

    graph = helper.make_graph([node], "spatial", [info(n, a) for n, a in inputs.items()],
                              [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in node.output],
                              [numpy_helper.from_array(np.asarray(a), n) for n, a in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    del model.graph.output[:]
    model.graph.output.extend(inferred.graph.output)
    return model


def assert_kiln_matches_ort(node: onnx.NodeProto, inputs: Mapping[str, np.ndarray],
                            constants: Mapping[str, np.ndarray] | None = None, opset: int = 19,
                            rtol: float = 1e-4, atol: float = 1e-5, reference: str = "ort") -> Sequence[np.ndarray]:
    """reference="onnx" compares with ONNX's own reference evaluator, where ORT departs from the spec."""
    model = one_node_model(node, inputs, constants or {}, opset)
    return assert_model_matches(model, inputs, rtol=rtol, atol=atol, reference=reference)


def assert_model_matches(model: onnx.ModelProto, inputs: Mapping[str, np.ndarray], rtol: float = 1e-4,
                         atol: float = 1e-5, reference: str = "ort") -> Sequence[np.ndarray]:
    if reference == "onnx":
        expected = ReferenceEvaluator(model).run(None, dict(inputs))
    else:
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        expected = session.run(None, dict(inputs))
    got = KilnBackend.prepare(model).run([inputs[i.name] for i in model.graph.input])
    for name, g, e in zip([o.name for o in model.graph.output], got, expected):
        assert g.shape == e.shape, f"{name}: shape {g.shape} != ORT {e.shape}"
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=name)
    return got
