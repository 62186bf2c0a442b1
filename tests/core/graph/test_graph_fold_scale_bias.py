"""fold_scale_bias: BatchNormalization (imported as Mul + Add per channel) and other constant
scales/shifts after a Conv or MatMul fold into its weights and bias."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from core.frontend import import_onnx
from core.graph.ir import TensorType
from core.graph.passes import eliminate_dead_code, fold_scale_bias
from tests.backend_calls import optimize
from tests.helpers.graphs import F32, assert_same_meaning, conv, image_builder, ops, rng


def _per_channel(b, values, name):
    return b.add_constant(np.asarray(values, np.float32).reshape(-1, 1, 1), name)


def test_mul_add_sub_div_chain_folds_into_the_conv():
    b, x = image_builder()
    y = conv(b, x, 4, 5, seed=0)
    r = rng(1)
    (y,) = b.add_node("Mul", [y, _per_channel(b, r.uniform(0.5, 2, 5), "scale")])
    (y,) = b.add_node("Add", [_per_channel(b, r.standard_normal(5), "shift"), y])  # constant first: commutative
    (y,) = b.add_node("Sub", [y, b.add_constant(np.float32(0.25), "s")])  # a scalar is per channel too
    (y,) = b.add_node("Div", [y, _per_channel(b, r.uniform(1, 3, 5), "d")])
    (out,) = b.add_node("Relu", [y])
    b.set_outputs([out])
    graph = b.build()
    after = eliminate_dead_code(fold_scale_bias(graph))
    assert ops(after) == ["Conv", "Relu"]
    assert len(after.nodes[0].inputs) == 3 and after.nodes[1].inputs == after.nodes[0].outputs
    assert_same_meaning(graph, after, rtol=1e-4, atol=1e-4)


def test_a_shift_gives_a_biasless_conv_a_bias():
    b, x = image_builder()
    y = conv(b, x, 4, 3, seed=2, bias=False)
    (y,) = b.add_node("Add", [y, b.add_constant(np.ones((1, 3, 1, 1), np.float32), "shift")])
    b.set_outputs([y])
    graph = b.build()
    after = eliminate_dead_code(fold_scale_bias(graph))
    assert ops(after) == ["Conv"] and len(after.nodes[0].inputs) == 3 and after.outputs == graph.outputs
    assert_same_meaning(graph, after)


def test_nothing_folds_when_the_conv_output_is_shared_or_the_constant_is_not_per_channel():
    b, x = image_builder()
    y = conv(b, x, 4, 3, seed=3)
    (scaled,) = b.add_node("Mul", [y, _per_channel(b, [1, 2, 3], "scale")])
    (other,) = b.add_node("Relu", [y])  # the conv output has a second reader
    z = conv(b, x, 4, 3, seed=4)
    (pixelwise,) = b.add_node("Mul", [z, b.add_constant(np.full((1, 1, 6, 6), 2.0, np.float32), "p")])
    (v,) = b.add_node("Add", [x, b.add_constant(np.ones((4, 1, 1), np.float32), "shift")])  # no conv before it
    b.set_outputs([scaled, other, pixelwise, v])
    graph = b.build()
    assert ops(fold_scale_bias(graph)) == ops(graph)


def test_matmul_takes_a_column_scale_and_keeps_its_bias_add():
    b, _ = image_builder()
    a = b.add_input("a", TensorType((3, 8), F32))
    w = b.add_constant(rng(5).standard_normal((8, 6)).astype(np.float32), "w")
    (y,) = b.add_node("MatMul", [a, w])
    (y,) = b.add_node("Mul", [y, b.add_constant(np.float32(0.5), "alpha")])
    (y,) = b.add_node("Mul", [y, b.add_constant(np.arange(1, 7, dtype=np.float32), "cols")])
    (y,) = b.add_node("Add", [y, b.add_constant(np.ones(6, np.float32), "bias")])
    b.set_outputs([y])
    graph = b.build()
    after = eliminate_dead_code(fold_scale_bias(graph))
    assert ops(after) == ["MatMul", "Add"]
    assert_same_meaning(graph.replace(inputs=("a",)), after.replace(inputs=("a",)))


def _conv_bn_relu_model() -> bytes:
    r = rng(6)
    inits = [numpy_helper.from_array(r.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(r.uniform(0.5, 1.5, 4).astype(np.float32), "gamma"),
             numpy_helper.from_array(r.standard_normal(4).astype(np.float32), "beta"),
             numpy_helper.from_array(r.standard_normal(4).astype(np.float32), "mean"),
             numpy_helper.from_array(r.uniform(0.5, 2, 4).astype(np.float32), "var")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["y"])]
    graph = helper.make_graph(nodes, "cbr", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)]).SerializeToString()


def test_imported_batch_norm_disappears_into_the_conv_at_o1():
    graph = import_onnx(_conv_bn_relu_model())
    assert ops(graph) == ["Conv", "Mul", "Add", "Relu"]
    after = optimize(graph, 1)
    assert ops(after) == ["Conv", "Relu"]
    assert_same_meaning(graph, after, rtol=1e-4, atol=1e-4)
