"""The integer_qdq pass on QDQ graphs written with onnx.helper: Conv/Gemm patterns become integer ops and
Requantize (with Relu/Clip as clamps), equal-scale max/layout ops run on the 8-bit values, what does not match
stays float; the rewritten graph means the same (reference interpreter, within one quantization step)."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from core.frontend import import_onnx
from core.graph.interpret import evaluate
from core.graph.passes.integer_qdq import integer_qdq

rng = np.random.default_rng(4)
X_SHAPE = (1, 4, 6, 6)


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def qdq_model(activation=None, weights_constant=True, pool_scale=0.05, per_channel=True, x_dtype=np.uint8,
              bias_unit=1.0):
    """x (float) -> Q -> DQ -> Conv(DQ w, DQ b) -> [activation] -> Q -> DQ -> MaxPool -> Q(pool_scale) -> DQ -> y."""
    zero = 128 if x_dtype == np.uint8 else 0
    w = rng.integers(-127, 128, (5, 4, 3, 3)).astype(np.int8)
    w_scale = rng.uniform(0.002, 0.01, 5).astype(np.float32) if per_channel else np.float32(0.005)
    x_scale = np.float32(0.03)
    inits = [_const("x_scale", x_scale), _const("x_zero", x_dtype(zero)), _const("w_scale", w_scale),
             _const("w_zero", np.zeros(np.shape(w_scale), np.int8)),
             _const("b", rng.integers(-900, 900, 5).astype(np.int32)),
             _const("b_scale", (x_scale * w_scale * bias_unit).astype(np.float32)), _const("y_scale", np.float32(0.05)),
             _const("y_zero", x_dtype(zero)), _const("p_scale", np.float32(pool_scale))]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(X_SHAPE))]
    if weights_constant:
        inits.append(_const("w", w))
    else:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.INT8, list(w.shape)))
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zero"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zero"], ["wd"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "b_scale"], ["bd"], axis=0),
             helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1])]
    conv_out = "c"
    if activation == "Relu":
        nodes.append(helper.make_node("Relu", ["c"], ["a"]))
        conv_out = "a"
    elif activation == "Clip":
        inits += [_const("lo", np.float32(-1.0)), _const("hi", np.float32(2.0))]
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["a"]))
        conv_out = "a"
    nodes += [helper.make_node("QuantizeLinear", [conv_out, "y_scale", "y_zero"], ["cq"]),
              helper.make_node("DequantizeLinear", ["cq", "y_scale", "y_zero"], ["cd"]),
              helper.make_node("MaxPool", ["cd"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
              helper.make_node("QuantizeLinear", ["p", "p_scale", "y_zero"], ["pq"]),
              helper.make_node("DequantizeLinear", ["pq", "p_scale", "y_zero"], ["y"])]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 3, 3])
    graph = helper.make_graph(nodes, "qdq", inputs, [output], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, w


def _feeds(graph, w):
    feeds = {"x": (rng.standard_normal(X_SHAPE) * 2).astype(np.float32)}
    if "w" in graph.inputs:
        feeds["w"] = w
    return feeds


def _rewritten(model):
    before = import_onnx(model)
    return before, integer_qdq(before)


def _assert_same_meaning(before, after, w, step=0.05):
    for _ in range(3):
        feeds = _feeds(before, w)
        want, got = evaluate(before, feeds)["y"], evaluate(after, feeds)["y"]
        assert np.abs(got - want).max() <= step * 1.001


def test_conv_pattern_becomes_integer_conv_and_requantize():
    model, w = qdq_model()
    before, after = _rewritten(model)
    ops = [n.op for n in after.nodes]
    assert "ConvInteger" in ops and "Requantize" in ops and "Conv" not in ops
    conv = next(n for n in after.nodes if n.op == "ConvInteger")
    assert after.type_of(conv.inputs[0]).dtype == "uint8" and after.type_of(conv.inputs[1]).dtype == "int8"
    assert after.constants[conv.inputs[1]].dtype == np.int8  # the weights stay integers
    _assert_same_meaning(before, after, w)


def test_relu_and_clip_become_clamps_in_the_quantized_domain():
    for activation, (lo, hi) in (("Relu", (128, 255)), ("Clip", (128 - 20, 128 + 40))):
        model, w = qdq_model(activation)
        before, after = _rewritten(model)
        requantize = next(n for n in after.nodes if n.op == "Requantize")
        assert (requantize.attr("min"), requantize.attr("max")) == (lo, hi)
        assert activation not in [n.op for n in after.nodes]
        _assert_same_meaning(before, after, w)


def test_equal_scale_max_pool_runs_on_the_integers():
    model, w = qdq_model(pool_scale=0.05)
    _, after = _rewritten(model)
    pool = next(n for n in after.nodes if n.op == "MaxPool")
    assert after.type_of(pool.inputs[0]).dtype == "uint8"
    model, w = qdq_model(pool_scale=0.07)  # another scale: dequantize, pool, quantize
    before, after = _rewritten(model)
    pool = next(n for n in after.nodes if n.op == "MaxPool")
    assert after.type_of(pool.inputs[0]).dtype == "float32"
    _assert_same_meaning(before, after, w, step=0.07)


def test_a_bias_of_another_scale_is_converted_to_accumulator_units():
    model, w = qdq_model(bias_unit=3.0)
    before, after = _rewritten(model)
    bias_add = next(n for n in after.nodes if n.op == "Add")
    bias = after.constants[bias_add.inputs[1]].reshape(-1)
    np.testing.assert_array_equal(bias, 3 * numpy_helper.to_array(
        next(t for t in model.graph.initializer if t.name == "b")))
    _assert_same_meaning(before, after, w)


def test_non_constant_weights_stay_float():
    model, w = qdq_model(weights_constant=False)
    before, after = _rewritten(model)
    ops = [n.op for n in after.nodes]
    assert "Conv" in ops and "ConvInteger" not in ops
    _assert_same_meaning(before, after, w)


def test_per_tensor_int8_activations():
    model, w = qdq_model(per_channel=False, x_dtype=np.int8)
    before, after = _rewritten(model)
    requantize = next(n for n in after.nodes if n.op == "Requantize")
    assert requantize.attr("to") == "int8" and after.constants[requantize.inputs[1]].ndim == 0
    _assert_same_meaning(before, after, w)


def test_qlinear_conv_imports_as_integer_conv_and_requantize():
    w = rng.integers(-127, 128, (3, 2, 3, 3)).astype(np.int8)
    inits = [_const("xs", np.float32(0.02)), _const("xz", np.uint8(100)), _const("w", w),
             _const("ws", np.full(3, 0.01, np.float32)), _const("wz", np.zeros(3, np.int8)),
             _const("ys", np.float32(0.1)), _const("yz", np.uint8(5)), _const("b", np.arange(3, dtype=np.int32))]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"])
    graph = helper.make_graph([node], "q", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 2, 5, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 3, 3, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    ops = [n.op for n in import_onnx(model).nodes]
    assert "ConvInteger" in ops and "Requantize" in ops and "Conv" not in ops


def test_concat_requantizes_parts_of_other_scales_to_its_output_scale():
    inits = [_const("sa", np.float32(0.05)), _const("sb", np.float32(0.11)), _const("z", np.uint8(128)),
             _const("zb", np.uint8(90))]
    nodes = [helper.make_node("QuantizeLinear", ["a", "sa", "z"], ["aq"]),
             helper.make_node("QuantizeLinear", ["b", "sb", "zb"], ["bq"]),
             helper.make_node("DequantizeLinear", ["aq", "sa", "z"], ["ad"]),
             helper.make_node("DequantizeLinear", ["bq", "sb", "zb"], ["bd"]),
             helper.make_node("Concat", ["ad", "bd"], ["c"], axis=1),
             helper.make_node("QuantizeLinear", ["c", "sa", "z"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "sa", "z"], ["y"])]
    shapes = {"a": [1, 2, 3, 3], "b": [1, 3, 3, 3]}
    graph = helper.make_graph(nodes, "concat", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                                for n, s in shapes.items()],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 3, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    before, after = _rewritten(model)
    concat = next(n for n in after.nodes if n.op == "Concat")
    assert [after.type_of(i).dtype for i in concat.inputs] == ["uint8", "uint8"]
    for _ in range(3):
        feeds = {n: (rng.standard_normal(s) * 3).astype(np.float32) for n, s in shapes.items()}
        np.testing.assert_array_equal(evaluate(after, feeds)["y"], evaluate(before, feeds)["y"])


def _elementwise_model(body, shapes, out_shape, inits):
    """Quantize each input (scale sN, zero zN) -> DequantizeLinear -> `body` nodes producing "r" -> Q(s_out, z_out)
    -> DequantizeLinear -> y."""
    nodes = []
    for k, name in enumerate(shapes):
        nodes += [helper.make_node("QuantizeLinear", [name, f"s{k}", f"z{k}"], [f"{name}q"]),
                  helper.make_node("DequantizeLinear", [f"{name}q", f"s{k}", f"z{k}"], [f"{name}d"])]
    nodes += body + [helper.make_node("QuantizeLinear", ["r", "s_out", "z_out"], ["rq"]),
                     helper.make_node("DequantizeLinear", ["rq", "s_out", "z_out"], ["y"])]
    graph = helper.make_graph(nodes, "elementwise", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                                     for n, s in shapes.items()],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                              [_const(n, v) for n, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _quantized_params(*pairs):
    return {name: value for k, (scale, zero) in enumerate(pairs)
            for name, value in ((f"s{k}", np.float32(scale)), (f"z{k}", zero))}


def test_qdq_add_and_mul_become_quantized_binary_ops():
    shapes = {"a": [1, 6, 5, 5], "b": [1, 6, 5, 5]}
    for op, activation, out in (("Add", "Relu", (0.06, np.uint8(0))), ("Add", None, (0.05, np.uint8(128))),
                                ("Mul", None, (0.09, np.int8(-3)))):
        body = [helper.make_node(op, ["ad", "bd"], ["m" if activation else "r"])]
        if activation:
            body.append(helper.make_node(activation, ["m"], ["r"]))
        inits = _quantized_params((0.04, np.uint8(120)), (0.07, np.int8(5)))
        inits.update(s_out=np.float32(out[0]), z_out=out[1])
        before, after = _rewritten(_elementwise_model(body, shapes, shapes["a"], inits))
        (binary,) = [n for n in after.nodes if n.op == "QuantizedBinary"]
        assert binary.attr("kind") == op.lower() and not {op, "Relu"} & {n.op for n in after.nodes}
        if activation:  # Relu at zero point 0 clamps nothing more than uint8 does; the range stays [0, 255]
            assert (binary.attr("min"), binary.attr("max")) == (0, 255)
        for _ in range(3):
            feeds = {n: (rng.standard_normal(s) * 4).astype(np.float32) for n, s in shapes.items()}  # saturates too
            want, got = evaluate(before, feeds)["y"], evaluate(after, feeds)["y"]
            assert np.abs(got - want).max() <= out[0] * 1.001


def test_elementwise_functions_of_8bit_data_become_lookup_tables():
    shapes = {"a": [1, 4, 7, 7]}
    for op, attrs, extra in (("Sigmoid", {}, []), ("LeakyRelu", {"alpha": 0.2}, []), ("HardSwish", {}, []),
                             ("Clip", {}, ["lo", "hi"])):
        inits = _quantized_params((0.05, np.int8(-10)))
        inits.update(s_out=np.float32(0.004), z_out=np.uint8(3), lo=np.float32(-0.5), hi=np.float32(0.6))
        model = _elementwise_model([helper.make_node(op, ["ad"] + extra, ["r"], **attrs)], shapes, shapes["a"], inits)
        before, after = _rewritten(model)
        (lookup,) = [n for n in after.nodes if n.op == "LookupTable"]
        assert after.constants[lookup.inputs[1]].dtype == np.uint8 and op not in {n.op for n in after.nodes}
        for _ in range(2):  # the table holds exactly what dequantize -> op -> quantize computes
            feeds = {"a": (rng.standard_normal(shapes["a"]) * 8).astype(np.float32)}  # int8's ends -128/127 too
            np.testing.assert_array_equal(evaluate(after, feeds)["y"], evaluate(before, feeds)["y"])


def test_per_channel_constants_keep_an_elementwise_op_float():
    shapes = {"a": [1, 3, 4, 4]}
    inits = _quantized_params((0.05, np.uint8(128)))
    inits.update(s_out=np.float32(0.05), z_out=np.uint8(128), p=np.array([[[0.1]], [[0.2]], [[0.3]]], np.float32))
    model = _elementwise_model([helper.make_node("Add", ["ad", "p"], ["r"])], shapes, shapes["a"], inits)
    _, after = _rewritten(model)
    assert "Add" in {n.op for n in after.nodes} and "LookupTable" not in {n.op for n in after.nodes}


def test_one_dimensional_conv_runs_as_an_integer_conv_over_rows():
    w = rng.integers(-127, 128, (6, 4, 3)).astype(np.int8)
    inits = [_const("xs", np.float32(0.03)), _const("xz", np.uint8(128)), _const("w", w),
             _const("ws", rng.uniform(0.002, 0.01, 6).astype(np.float32)), _const("wz", np.zeros(6, np.int8)),
             _const("ys", np.float32(0.05)), _const("yz", np.uint8(100))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("Conv", ["xd", "wd"], ["c"], pads=[2, 0], strides=[2], dilations=[2]),
             helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "conv1d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 21])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    before, after = _rewritten(model)
    ops = [n.op for n in after.nodes]
    assert "ConvInteger" in ops and "Conv" not in ops
    conv = next(n for n in after.nodes if n.op == "ConvInteger")
    assert after.type_of(conv.inputs[0]).shape == (2, 4, 1, 21) and after.constants[conv.inputs[1]].dtype == np.int8
    for _ in range(3):
        feeds = {"x": (rng.standard_normal((2, 4, 21)) * 2).astype(np.float32)}
        assert np.abs(evaluate(after, feeds)["y"] - evaluate(before, feeds)["y"]).max() <= 0.05 * 1.001


def test_degenerate_scales_keep_the_float_path():
    # An attention mask calibrated to one value gets a zero scale: only float arithmetic reproduces ORT there.
    shapes = {"a": [1, 2, 3, 3], "b": [1, 2, 3, 3]}
    for scales in ((0.0, 0.05), (0.04, 0.05)):
        inits = _quantized_params((scales[0], np.uint8(0)), (0.07, np.uint8(5)))
        inits.update(s_out=np.float32(scales[1]), z_out=np.uint8(0))
        for body in ([helper.make_node("Add", ["ad", "bd"], ["r"])], [helper.make_node("Sigmoid", ["ad"], ["r"])]):
            _, after = _rewritten(_elementwise_model(body, shapes, shapes["a"], inits))
            integer = {"QuantizedBinary", "LookupTable"} & {n.op for n in after.nodes}
            assert bool(integer) == (scales[0] > 0), (scales, body[0].op_type)
