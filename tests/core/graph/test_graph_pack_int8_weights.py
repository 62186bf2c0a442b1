"""pack_int8_weights: MatMulInteger with constant weights becomes MatMulIntegerPacked for the target's
dot-product intrinsic (chosen by the CPU backend from the target's features); compiled models match
ONNX Runtime exactly, with u8 and s8 data, per-column weight zero points and weights that must stay unpacked."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import core
from core.driver.reference import reference_session
from tests.backend_calls import runs_on_host
from core.frontend import import_onnx
from core.graph.passes.pack_int8_weights import pack_int8_weights
from core.target import get_target

rng = np.random.default_rng(8)
ONNX_TYPES = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8}


def matmul_integer_model(data_dtype="uint8", weights=None, a_zero=3, b_zero=None, rows=6):
    weights = rng.integers(-128, 128, (40, 24)).astype(np.int8) if weights is None else weights
    inits = [numpy_helper.from_array(weights, "w"), numpy_helper.from_array(np.array(a_zero, data_dtype), "az")]
    names = ["a", "w", "az"]
    if b_zero is not None:
        inits.append(numpy_helper.from_array(np.asarray(b_zero, weights.dtype), "wz"))
        names.append("wz")
    nodes = [helper.make_node("MatMulInteger", names, ["acc"]),
             helper.make_node("Add", ["acc", "bias"], ["y"])]
    inits.append(numpy_helper.from_array(rng.integers(-999, 999, weights.shape[1]).astype(np.int32), "bias"))
    graph = helper.make_graph(nodes, "mmi", [helper.make_tensor_value_info("a", ONNX_TYPES[data_dtype], [rows, 40])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [rows, weights.shape[1]])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


AVX2 = ("x86_avx2_u8s7_8x4", "x86_avx2_s16s8_8x2", "x86_avx2_u8s8_8x4")  # x86-64-v3's, best first


def packed_graph(model, intrinsics=("x86_avx2_u8s7_8x4", "x86_avx2_u8s8_8x4")):
    return pack_int8_weights(import_onnx(model.SerializeToString()), intrinsics=intrinsics)


def ops_after_packing(model, **kw):
    return [n.op for n in packed_graph(model, **kw).nodes]


def test_constant_weights_are_packed_and_unfit_ones_are_not():
    assert "MatMulIntegerPacked" in ops_after_packing(matmul_integer_model())
    assert "MatMulInteger" in ops_after_packing(matmul_integer_model(), intrinsics=())
    # uint8 weights around 128 shift into int8 exactly; asymmetric int8 weights (here -128 - 5) do not.
    u8 = rng.integers(0, 256, (40, 24)).astype(np.uint8)
    assert "MatMulIntegerPacked" in ops_after_packing(matmul_integer_model(weights=u8, b_zero=128))
    s8 = np.full((40, 24), -128, np.int8)
    assert "MatMulInteger" in ops_after_packing(matmul_integer_model(weights=s8, b_zero=5))


def test_each_node_takes_the_first_intrinsic_exact_for_its_weights():
    def chosen(weights):
        nodes = packed_graph(matmul_integer_model(weights=weights)).nodes
        (node,) = [n for n in nodes if n.op == "MatMulIntegerPacked"]
        return node.attr("intrinsic")

    seven_bit = rng.integers(-64, 65, (40, 24)).astype(np.int8)  # reduce_range weights: vpmaddubsw cannot saturate
    assert chosen(seven_bit) == "x86_avx2_u8s7_8x4"
    assert chosen(np.where(seven_bit == 0, -65, seven_bit).astype(np.int8)) == "x86_avx2_u8s8_8x4"
    full = packed_graph(matmul_integer_model(weights=np.where(seven_bit == 0, -65, seven_bit).astype(np.int8)),
                        intrinsics=AVX2).nodes
    assert [n.attr("intrinsic") for n in full if n.op == "MatMulIntegerPacked"] == ["x86_avx2_s16s8_8x2"]


def test_the_cpu_backend_picks_the_intrinsic_from_features():
    from core.backends import get_backend

    options = lambda spec: get_backend(get_target(spec)).pass_options(get_target(spec))["pack_int8_weights"]  # noqa
    assert options("x86-64-v3") == {"intrinsics": AVX2}
    assert options("rpi5") == {"intrinsics": ("aarch64_sdot_s8s8_4x4",)}
    assert options("aarch64") == {"intrinsics": ()}


HOST_TARGETS = [spec for spec in ("x86-64-v3", "native") if runs_on_host(get_target(spec))]


@pytest.mark.parametrize("spec", HOST_TARGETS)
@pytest.mark.parametrize("data_dtype,b_zero", [("uint8", None), ("int8", None),
                                               ("uint8", np.arange(24, dtype=np.int8) % 5 - 2)])
def test_compiled_packed_matmul_matches_onnxruntime(spec, data_dtype, b_zero):
    weights = rng.integers(-120, 121, (40, 24)).astype(np.int8)  # minus the zero points, still int8: packed
    model = matmul_integer_model(data_dtype, weights, b_zero=b_zero, a_zero=255 if data_dtype == "uint8" else -128)
    artifact = core.compile(model, target=spec)
    kernels = [k["ops"] for k in artifact.report["kernels"]]
    assert any("MatMulIntegerPacked" in ops and "Add" in ops for ops in kernels), kernels  # one fused kernel
    assert artifact.report["validation"]["max_abs_err"] == 0.0
    lo, hi = (0, 255) if data_dtype == "uint8" else (-128, 127)
    feeds = {"a": rng.integers(lo, hi + 1, (6, 40)).astype(data_dtype)}
    feeds["a"][0] = hi  # a row of saturated data
    want = reference_session(model.SerializeToString(), 1).run(None, feeds)[0]
    np.testing.assert_array_equal(artifact.load().run(feeds)["y"], want)


def conv_integer_model(data_dtype="uint8", group=1, channels=6):
    weights = rng.integers(-128, 128, (16, channels // group, 3, 3)).astype(np.int8)
    inits = [numpy_helper.from_array(weights, "w"), numpy_helper.from_array(np.array(7, data_dtype), "xz"),
             numpy_helper.from_array(np.array(0, np.int8), "wz"),  # ORT has per-tensor zero points only
             numpy_helper.from_array(np.array(3e-4, np.float32), "scale")]
    nodes = [helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["acc"], pads=[1, 1, 1, 1], strides=[2, 1],
                              group=group),
             helper.make_node("Cast", ["acc"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["f", "scale"], ["y"])]
    x = helper.make_tensor_value_info("x", ONNX_TYPES[data_dtype], [1, channels, 9, 8])
    graph = helper.make_graph(nodes, "convi", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 5, 8])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("spec", HOST_TARGETS)
@pytest.mark.parametrize("data_dtype,group", [("uint8", 1), ("int8", 1), ("uint8", 2)])
def test_compiled_packed_conv_matches_onnxruntime(spec, data_dtype, group):
    model = conv_integer_model(data_dtype, group)
    artifact = core.compile(model, target=spec)
    ops = [op for k in artifact.report["kernels"] for op in k["ops"]]
    assert ("ConvIntegerPacked" in ops) == (group == 1), ops  # grouped convs keep the generic int32 kernel
    assert artifact.report["validation"]["max_abs_err"] == 0.0


@pytest.mark.slow
def test_sdot_kernel_under_qemu_matches_onnxruntime():
    artifact = core.compile(matmul_integer_model("uint8"), target="rpi5")
    validation = artifact.report["validation"]
    assert validation.get("passed") and validation["max_abs_err"] == 0.0, validation
    assert any("MatMulIntegerPacked" in k["ops"] for k in artifact.report["kernels"])


@pytest.mark.parametrize("spec", HOST_TARGETS)
@pytest.mark.parametrize("data_dtype", ["uint8", "int8"])
def test_a_run_time_data_zero_point_still_packs(spec, data_dtype):
    """DynamicQuantizeLinear's zero point is computed at run time: the packed kernel takes it as a fourth input and
    scales the per-unit correction by it (plus the data shift, for int8 data on a u8 intrinsic)."""
    weights = rng.integers(-120, 121, (40, 24)).astype(np.int8)
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["a", "w", "az"], ["y"])], "dynamic",
                              [helper.make_tensor_value_info("a", ONNX_TYPES[data_dtype], [5, 40]),
                               helper.make_tensor_value_info("az", ONNX_TYPES[data_dtype], [])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [5, 24])],
                              initializer=[numpy_helper.from_array(weights, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    (node,) = [n for n in packed_graph(model).nodes if n.op == "MatMulIntegerPacked"]
    assert node.inputs[3] == "az"
    session = reference_session(model.SerializeToString(), 1)
    lo, hi = (0, 255) if data_dtype == "uint8" else (-128, 127)
    with core.compile(model, target=spec, validate=False, benchmark=False).load() as module:
        for zero in (lo, hi, (lo + hi) // 2):
            feeds = {"a": rng.integers(lo, hi + 1, (5, 40)).astype(data_dtype), "az": np.array(zero, data_dtype)}
            feeds["a"][0] = hi
            np.testing.assert_array_equal(module.run(feeds)["y"], session.run(None, feeds)[0])
