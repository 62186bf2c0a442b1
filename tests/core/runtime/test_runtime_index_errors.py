"""Out-of-range indices (Gather, GatherElements, GatherND, ScatterND, ScatterElements) fail the run with an error
naming the node and the index, through the package's loader and the artifact's standalone one; in-range indices,
negatives included, match ONNX Runtime (issue 36, defect 2)."""
from __future__ import annotations

import importlib.util
import tarfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper

import core
import core.runtime
from core.runtime.loader import KilnRuntimeError

RNG = np.random.default_rng(36)


def _model(nodes, inputs: dict, outputs: dict, initializers: dict) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "index_checks",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs.items()],
        [helper.make_tensor_value_info(n, TP.FLOAT, s) for n, s in outputs.items()],
        [onnx.numpy_helper.from_array(a, n) for n, a in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


def _compiled(model: onnx.ModelProto, tmp_path):
    path = tmp_path / "model.tar.gz"
    core.compile(model, target="x86-64-v3").save(path)
    return path, core.runtime.load(path)


def _same_as_onnxruntime(model: onnx.ModelProto, module, feeds: dict) -> None:
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = module.run(feeds)
    for out, expected in zip(model.graph.output, want):
        np.testing.assert_allclose(got[out.name], expected, rtol=1e-6, atol=1e-6)


TABLE = RNG.standard_normal((1000, 16)).astype(np.float32)


def _embedding(dtype=np.int64) -> onnx.ModelProto:
    """Gather rows of a 1000-row table, then an elementwise op fused into the same kernel."""
    return _model([helper.make_node("Gather", ["table", "ids"], ["rows"], name="embedding_lookup"),
                   helper.make_node("Relu", ["rows"], ["y"], name="relu")],
                  {"ids": np.zeros(4, dtype)}, {"y": [4, 16]}, {"table": TABLE})


def test_gather_out_of_range_is_an_error_naming_node_and_index(tmp_path):
    model = _embedding()
    _, module = _compiled(model, tmp_path)
    _same_as_onnxruntime(model, module, {"ids": np.array([0, 999, -1, -1000], np.int64)})
    for bad in (25518, 10**12, -5000, 1000, -1001):
        with pytest.raises(KilnRuntimeError, match=rf"index {bad} is out of range in Gather node of output 'rows'.*"
                                                   rf"axis has 1000 elements \(valid indices: -1000 to 999\)"):
            module.run({"ids": np.array([3, bad, 0, 1], np.int64)})
    _same_as_onnxruntime(model, module, {"ids": np.array([7, 8, -2, 500], np.int64)})  # usable after an error


def test_the_standalone_loader_raises_too(tmp_path):
    path, _ = _compiled(_embedding(np.int32), tmp_path)
    with tarfile.open(path) as tar:
        tar.extractall(tmp_path / "art", filter="data")
    spec = importlib.util.spec_from_file_location("kiln_loader_copy", tmp_path / "art" / "kiln_loader.py")
    standalone = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(standalone)
    module = standalone.load(tmp_path / "art")
    np.testing.assert_array_equal(module.run({"ids": np.array([1, 2, 3, -4], np.int32)})["y"],
                                  np.maximum(TABLE[[1, 2, 3, -4]], 0))
    with pytest.raises(Exception, match=r"index -2147483648 is out of range in Gather"):
        module.run({"ids": np.array([1, np.iinfo(np.int32).min, 3, 4], np.int32)})


def test_lane_varying_gather_and_gather_elements(tmp_path):
    """Indices that vary along the vectorized axis take the vector check."""
    data = RNG.standard_normal((8, 300)).astype(np.float32)
    model = _model([helper.make_node("Gather", ["data", "cols"], ["picked"], axis=1, name="pick_columns"),
                    helper.make_node("GatherElements", ["data", "where"], ["elems"], axis=1, name="pick_elements")],
                   {"cols": np.zeros(64, np.int64), "where": np.zeros((8, 40), np.int64)},
                   {"picked": [8, 64], "elems": [8, 40]}, {"data": data})
    _, module = _compiled(model, tmp_path)
    good = {"cols": RNG.integers(-300, 300, 64), "where": RNG.integers(-300, 300, (8, 40))}
    _same_as_onnxruntime(model, module, good)
    cols = good["cols"].copy()
    cols[37] = 300
    with pytest.raises(KilnRuntimeError, match=r"index 300 is out of range in Gather node of output 'picked'"):
        module.run({**good, "cols": cols})
    where = good["where"].copy()
    where[5, 11] = -301
    with pytest.raises(KilnRuntimeError, match=r"index -301 is out of range in GatherElements node of output 'elems'"):
        module.run({**good, "where": where})


def test_gather_nd(tmp_path):
    data = RNG.standard_normal((5, 6, 7)).astype(np.float32)
    model = _model([helper.make_node("GatherND", ["data", "idx"], ["y"], name="gnd")],
                   {"idx": np.zeros((3, 2), np.int64)}, {"y": [3, 7]}, {"data": data})
    _, module = _compiled(model, tmp_path)
    _same_as_onnxruntime(model, module, {"idx": np.array([[0, 0], [-5, -6], [4, 5]], np.int64)})
    with pytest.raises(KilnRuntimeError, match=r"index 6 is out of range in GatherND node of output 'y'.*has 6 elements"):
        module.run({"idx": np.array([[0, 0], [1, 6], [4, 5]], np.int64)})


@pytest.mark.parametrize("op", ["ScatterND", "ScatterElements"])
def test_scatter(op, tmp_path):
    data = RNG.standard_normal((6, 4)).astype(np.float32)
    if op == "ScatterND":
        node = helper.make_node(op, ["data", "idx", "upd"], ["y"], reduction="add", name="scatter")
        feeds = {"idx": np.array([[1], [-1], [1]], np.int64), "upd": RNG.standard_normal((3, 4)).astype(np.float32)}
        bad = {**feeds, "idx": np.array([[1], [6], [2]], np.int64)}
    else:
        node = helper.make_node(op, ["data", "idx", "upd"], ["y"], axis=0, reduction="add", name="scatter")
        feeds = {"idx": np.array([[0, -6, 5, 2], [1, 1, 1, 1]], np.int64),
                 "upd": RNG.standard_normal((2, 4)).astype(np.float32)}
        bad = {**feeds, "idx": np.array([[0, -7, 5, 2], [1, 1, 1, 1]], np.int64)}
    model = _model([node], {"data": data, **feeds}, {"y": [6, 4]}, {})
    _, module = _compiled(model, tmp_path)
    _same_as_onnxruntime(model, module, {"data": data, **feeds})
    with pytest.raises(KilnRuntimeError, match=rf"index {6 if op == 'ScatterND' else -7} is out of range in {op} node"):
        module.run({"data": data, **bad})


def test_the_shaped_entry_reports_it_too(tmp_path):
    """A model compiled for a range of index counts: kiln_run_shaped runs a bucket, which fails the same way."""
    model = _embedding()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "n"
    path = tmp_path / "ranged.tar.gz"
    core.compile(model, target="x86-64-v3", input_shapes={"ids": "1..16"}, benchmark=False).save(path)
    module = core.runtime.load(path)
    _same_as_onnxruntime(model, module, {"ids": np.array([5, -5, 999], np.int64)})
    with pytest.raises(KilnRuntimeError, match=r"index 1000 is out of range in Gather node of output 'rows'"):
        module.run({"ids": np.array([5, 1000, 0, 1, 2], np.int64)})
