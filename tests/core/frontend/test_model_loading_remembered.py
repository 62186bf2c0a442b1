"""loads_remembered (kiln compile's pre-flight, then its import): a model file is read and checked once, each load
gets its own copy, a changed file is read again, and outside the block every load reads the file; shape inference
without the large weights' values infers what it infers with them."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

from core.errors import InvalidModelError
from core.frontend import model_loading
from core.frontend.model_loading import load_model, loads_remembered
from tests.conftest import tiny_model


@pytest.fixture
def checks(monkeypatch):
    """How often the ONNX checker ran."""
    seen = []
    real = model_loading._check
    monkeypatch.setattr(model_loading, "_check", lambda source: (seen.append(source), real(source))[1])
    return seen


def test_a_model_file_is_checked_once_and_each_load_gets_its_own_copy(tmp_path, checks):
    path = tmp_path / "tiny.onnx"
    path.write_bytes(tiny_model(seed=1))
    with loads_remembered():
        first, second = load_model(path), load_model(str(path))
        assert len(checks) == 1
        assert first.SerializeToString() == second.SerializeToString() == load_model(path).SerializeToString()
        first.graph.node[0].name = "renamed"  # the quantizer names nodes: the next load must not see it
        assert load_model(path).graph.node[0].name != "renamed"
        assert len(checks) == 1
        path.write_bytes(tiny_model(seed=2))
        os.utime(path, ns=(1, 1))  # a changed file (size equal, time not): read again
        changed = load_model(path)
        assert len(checks) == 2
        assert onnx.numpy_helper.to_array(changed.graph.initializer[0]).tolist() != \
            onnx.numpy_helper.to_array(first.graph.initializer[0]).tolist()
    load_model(path)
    assert len(checks) == 3  # outside the block: read and checked again


def test_a_bad_file_is_refused_every_time_not_remembered(tmp_path, checks):
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"not a model")
    with loads_remembered():
        for _ in range(2):
            with pytest.raises(InvalidModelError, match="not an ONNX model"):
                load_model(path)


def test_shape_inference_without_the_weights_values_infers_the_same_shapes_and_leaves_the_model_alone():
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((16, 3, 3, 3)).astype(np.float32), "w")  # 432: kept
    wide = numpy_helper.from_array(rng.standard_normal((16, 16, 3, 3)).astype(np.float32), "w2")  # 2304: dropped
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")  # a value inference reads
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Conv", ["c", "w2"], ["c2"]),
         helper.make_node("Resize", ["c2", "", "scales"], ["y"], mode="nearest")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [weight, wide, scales])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    before = proto.SerializeToString()
    expected = onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
    inferred = model_loading._infer_shapes(proto)
    assert proto.SerializeToString() == before  # the caller's model keeps its weights
    assert list(inferred.graph.value_info) == list(expected.graph.value_info)
    assert [d.dim_value for d in inferred.graph.output[0].type.tensor_type.shape.dim] == [1, 16, 12, 12]
