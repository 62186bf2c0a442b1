"""BatchNormalization, InstanceNormalization, LayerNormalization (and its statistics outputs), RMSNormalization,
GroupNormalization, LpNormalization, LRN, MeanVarianceNormalization and Softmax/LogSoftmax (opset 11 vs 13)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper


F32 = "float32"


def _bn_params(c, seed=0):
    rng = np.random.default_rng(seed)
    return {"scale": rng.uniform(0.5, 1.5, c).astype(np.float32), "bias": rng.standard_normal(c).astype(np.float32),
            "mean": rng.standard_normal(c).astype(np.float32), "var": rng.uniform(0.2, 2.0, c).astype(np.float32)}


@pytest.mark.parametrize("shape", [[2, 3, 4, 5], [2, 3], [2, 3, 7]])
def test_batch_norm_with_constant_parameters_becomes_mul_add(shape, onnx_model, check_ort):
    node = helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], epsilon=1e-3)
    model = onnx_model([node], {"x": (F32, shape)}, {"y": F32}, initializers=_bn_params(shape[1]))
    graph = check_ort(model)
    assert [n.op for n in graph.nodes] == ["Mul", "Add"]
    assert graph.constants[graph.nodes[0].inputs[1]].shape == (shape[1],) + (1,) * (len(shape) - 2)


def test_batch_norm_with_dynamic_parameters(onnx_model, check_ort):
    node = helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"])
    params = _bn_params(3)
    model = onnx_model([node], {"x": (F32, [2, 3, 4, 4]), "var": (F32, [3])}, {"y": F32}, opset=9,
                       initializers={k: v for k, v in params.items() if k != "var"})
    graph = check_ort(model, {"x": np.random.default_rng(1).standard_normal((2, 3, 4, 4)).astype(np.float32),
                              "var": params["var"]})
    assert "Sqrt" in [n.op for n in graph.nodes]


def test_instance_norm(onnx_model, check_ort):
    node = helper.make_node("InstanceNormalization", ["x", "scale", "bias"], ["y"], epsilon=1e-4)
    params = _bn_params(3)
    model = onnx_model([node], {"x": (F32, [2, 3, 5, 4])}, {"y": F32},
                       initializers={"scale": params["scale"], "bias": params["bias"]})
    check_ort(model, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("axis,with_bias", [(-1, True), (1, True), (2, False)])
def test_layer_norm(axis, with_bias, onnx_model, check_ort):
    shape = [2, 3, 8]
    normalized = shape[axis:]
    rng = np.random.default_rng(3)
    inits = {"scale": rng.standard_normal(normalized).astype(np.float32)}
    if with_bias:
        inits["bias"] = rng.standard_normal(normalized).astype(np.float32)
    node = helper.make_node("LayerNormalization", ["x", *inits], ["y"], axis=axis, epsilon=1e-5)
    graph = check_ort(onnx_model([node], {"x": (F32, shape)}, {"y": F32}, initializers=inits))
    assert graph.nodes[0].attr("axis") == axis % 3


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_layer_norm_mean_and_inv_std_dev_outputs(axis, onnx_model, check_ort):
    shape = [2, 3, 5]
    rng = np.random.default_rng(4)
    inits = {"scale": rng.standard_normal(shape[axis:]).astype(np.float32),
             "bias": rng.standard_normal(shape[axis:]).astype(np.float32)}
    node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y", "mean", "inv_std"], axis=axis)
    model = onnx_model([node], {"x": (F32, shape)}, {"y": F32, "mean": F32, "inv_std": F32}, initializers=inits)
    graph = check_ort(model, rtol=1e-4, atol=1e-5)
    assert graph.type_of("mean").shape == tuple(d if a < axis % 3 else 1 for a, d in enumerate(shape))
    # One fused op gives all three outputs (float32 statistics).
    assert [(n.op, n.attr("statistics")) for n in graph.nodes] == [("LayerNormalization", 2)]


def test_layer_norm_statistics_of_double_input_follow_the_function_body(onnx_model, check_ort):
    # A float64 input is beyond the float32 kernel: ONNX's function body, statistics in stash_type float32.
    inits = {"scale": np.linspace(0.5, 2, 5)}
    node = helper.make_node("LayerNormalization", ["x", "scale"], ["y", "mean"], axis=-1)
    model = onnx_model([node], {"x": ("float64", [3, 5])}, {"y": "float64", "mean": F32}, initializers=inits)
    graph = check_ort(model, rtol=1e-6, atol=1e-6)
    assert "LayerNormalization" not in [n.op for n in graph.nodes]


@pytest.mark.parametrize("axis", [0, -1, 2])
def test_rms_norm(axis, onnx_model, check_ort):
    shape = [2, 3, 4]
    scale = np.random.default_rng(5).standard_normal(shape[axis:]).astype(np.float32)
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], axis=axis, epsilon=1e-3)
    check_ort(onnx_model([node], {"x": (F32, shape)}, {"y": F32}, opset=23, initializers={"scale": scale}),
              rtol=1e-4, atol=1e-5)


def test_group_norm(onnx_model, check_ort):
    rng = np.random.default_rng(6)
    inits = {"scale": rng.standard_normal(6).astype(np.float32), "bias": rng.standard_normal(6).astype(np.float32)}
    node = helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=3, epsilon=1e-3)
    check_ort(onnx_model([node], {"x": (F32, [2, 6, 3, 2])}, {"y": F32}, opset=21, initializers=inits),
              rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("p,axis", [(1, 0), (2, -1), (2, 1)])
def test_lp_norm(p, axis, onnx_model, check_ort):
    node = helper.make_node("LpNormalization", ["x"], ["y"], p=p, axis=axis)
    check_ort(onnx_model([node], {"x": (F32, [3, 4, 2])}, {"y": F32}, opset=22), rtol=1e-5, atol=1e-6)


# Explicit axes: with the default ones ONNX's strict shape inference fails inside MVN's own function body
# (a Constant without a value), so the loader rejects such models before conversion (test_mvn).
@pytest.mark.parametrize("axes", [[0, 2, 3], [1], [0, -1]])
def test_mean_variance_normalization(axes, onnx_model, check_ort):
    node = helper.make_node("MeanVarianceNormalization", ["x"], ["y"], axes=axes)
    check_ort(onnx_model([node], {"x": (F32, [2, 3, 4, 2])}, {"y": F32}, opset=13), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn_sums_squares_over_a_channel_window(size, onnx_model, check_ort):
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=0.3, beta=0.6, bias=1.5)
    check_ort(onnx_model([node], {"x": (F32, [2, 5, 3, 3])}, {"y": F32}, opset=13), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset,axis", [(11, 1), (11, 0), (11, -1), (11, 2), (13, 1), (13, -1), (13, 0)])
def test_softmax_opsets(op, opset, axis, onnx_model, check_ort):
    node = helper.make_node(op, ["x"], ["y"], axis=axis)
    graph = check_ort(onnx_model([node], {"x": (F32, [2, 3, 4])}, {"y": F32}, opset=opset))
    softmax = [n for n in graph.nodes if n.op == op]
    assert len(softmax) == 1
    if opset == 11 and axis % 3 != 2:
        assert [n.op for n in graph.nodes] == ["Reshape", op, "Reshape"]
        assert softmax[0].attr("axis") == 1


def test_softmax_default_axis_differs_between_opsets(onnx_model, check_ort):
    for opset in (11, 13):
        check_ort(onnx_model([helper.make_node("Softmax", ["x"], ["y"])], {"x": (F32, [2, 3, 4])}, {"y": F32},
                             opset=opset))


@pytest.mark.parametrize("op,attrs,outputs,opset", [
    ("LayerNormalization", {"axis": 1}, ["y", "mean", "inv_std"], 17),
    ("RMSNormalization", {"axis": -1, "epsilon": 1e-3}, ["y"], 23),
    ("GroupNormalization", {"num_groups": 2}, ["y"], 21),
    ("LpNormalization", {"axis": 1, "p": 1}, ["y"], 22),
    ("LRN", {"size": 3, "alpha": 0.5}, ["y"], 13),
    ("MeanVarianceNormalization", {"axes": [0, 2, 3]}, ["y"], 13),
])
def test_normalizations_compile_to_native_code(op, attrs, outputs, opset, onnx_model, ort_runner):
    from core.onnx_backend.backend import KilnBackend

    rng = np.random.default_rng(7)
    shape = [2, 4, 3, 3]
    inits = {}
    if op in ("LayerNormalization", "RMSNormalization"):
        inits["scale"] = rng.standard_normal(shape[attrs["axis"]:]).astype(np.float32)
    if op == "GroupNormalization":
        inits = {"scale": rng.standard_normal(4).astype(np.float32), "bias": rng.standard_normal(4).astype(np.float32)}
    node = helper.make_node(op, ["x", *inits], outputs, **attrs)
    model = onnx_model([node], {"x": (F32, shape)}, {o: F32 for o in outputs}, opset=opset, initializers=inits)
    x = rng.standard_normal(shape).astype(np.float32)
    x[0, :, 0, 0] = 0  # a zero LpNormalization norm gives 0
    got = KilnBackend.prepare(model).run([x])
    for name, ours, expected in zip(outputs, got, ort_runner(model, {"x": x})):
        np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-5, err_msg=name)
