"""KilnBackend's own contract: devices, typed errors, symbolic dims and shape-setting inputs compiled per run."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from core.onnx_backend.backend import KilnBackend
from core.errors import KilnError, UnsupportedOpError

pytestmark = pytest.mark.timeout(120)


def _model(nodes, inputs, outputs, opset=17):
    return helper.make_model(helper.make_graph(nodes, "m", inputs, outputs),
                             opset_imports=[helper.make_opsetid("", opset)])


def test_devices():
    assert KilnBackend.supports_device("CPU")
    assert not KilnBackend.supports_device("CUDA")
    with pytest.raises(KilnError):
        KilnBackend.prepare(_model([], [], []), "CUDA")


def test_unsupported_op_is_typed_and_raised_by_prepare():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    # Bernoulli samples at random: a real ONNX op Kiln does not compile (its outputs cannot be validated)
    with pytest.raises(UnsupportedOpError, match="Bernoulli"):
        KilnBackend.prepare(_model([helper.make_node("Bernoulli", ["x"], ["y"])], [x], [y]))


def test_symbolic_dims_compile_once_per_shape():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    rep = KilnBackend.prepare(_model([helper.make_node("Relu", ["x"], ["y"])], [x], [y]))
    for n in (2, 5, 2):
        data = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
        (out,) = rep.run([data])
        np.testing.assert_array_equal(out, np.maximum(data, 0))
    assert len(rep._compiled) == 2


def test_shape_input_specializes_on_its_value():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    shape = helper.make_tensor_value_info("shape", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])
    rep = KilnBackend.prepare(_model([helper.make_node("Reshape", ["x", "shape"], ["y"])], [x, shape], [y]))
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    for target in ([3, 2], [6, 1]):
        (out,) = rep.run([data, np.array(target, dtype=np.int64)])
        np.testing.assert_array_equal(out, data.reshape(target))


def test_run_node_outputs_in_order():
    node = helper.make_node("Split", ["x"], ["a", "b"], axis=0)
    a, b = KilnBackend.run_node(node, [np.arange(4, dtype=np.float32)], opset_version=13)
    np.testing.assert_array_equal(a, [0, 1])
    np.testing.assert_array_equal(b, [2, 3])
