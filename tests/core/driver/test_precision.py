"""compile(precision=...): float16/bfloat16 models and float32 models at fp16/bf16 keep half-size weights, run with
float32 arithmetic and match ONNX Runtime (float16 models against ORT on the same model, fp16/bf16 compiles of a
float32 model against its float32 result, at the half format's tolerance)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import core
from core.driver.precision import PrecisionError, model_precision, store_weights
from core.errors import KilnError
from core.frontend import import_onnx
from core.graph.ir import TensorType
from core.target import get_target

rng = np.random.default_rng(0)
W = rng.standard_normal((256, 64)).astype(np.float32) / 16
B = rng.standard_normal(64).astype(np.float32)
CONV_W = rng.standard_normal((32, 16, 3, 3)).astype(np.float32) / 8


def mlp(elem: int = TensorProto.FLOAT) -> bytes:
    """x[4,256] @ W + b, Relu, in `elem` (weights, inputs and outputs alike)."""
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["z"]),
             helper.make_node("Relu", ["z"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", elem, [4, 256])],
                              [helper.make_tensor_value_info("y", elem, [4, 64])],
                              [numpy_helper.from_array(W.astype(dtype), "w"), numpy_helper.from_array(B.astype(dtype), "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def conv(elem: int = TensorProto.FLOAT) -> bytes:
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "conv",
                              [helper.make_tensor_value_info("x", elem, [1, 16, 14, 14])],
                              [helper.make_tensor_value_info("y", elem, [1, 32, 14, 14])],
                              [numpy_helper.from_array(CONV_W.astype(dtype), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def compiled(model, **kwargs):
    return core.compile(model, benchmark=False, threads=1, **kwargs)


@pytest.mark.parametrize("model", [mlp, conv], ids=["matmul", "conv"])
def test_a_float16_model_keeps_half_size_weights_and_matches_onnxruntime(model):
    fp32, fp16 = compiled(model()), compiled(model(TensorProto.FLOAT16))
    val = fp16.report["validation"]
    assert val["passed"] and val["reference"] == "onnxruntime" and val["outputs"][0]["dtype"] == "float16"
    assert fp16.metadata["precision"] == "fp16" and fp32.metadata["precision"] == "fp32"
    assert fp16.metadata["weights_bytes"] <= 0.55 * fp32.metadata["weights_bytes"]
    assert fp16.report["precision"]["weights_bytes_by_dtype"]["float16"] >= 2 * (W.size if model is mlp else CONV_W.size)


@pytest.mark.parametrize("precision, eps", [("fp16", 2 ** -10), ("bf16", 2 ** -7)])
def test_a_float32_model_at_half_precision_is_judged_at_that_tolerance(precision, eps):
    full = compiled(mlp())
    half = compiled(mlp(), precision=precision, bisect=True)
    out = half.report["validation"]["outputs"][0]
    assert half.report["validation"]["passed"] and out["dtype"] == "float32"
    assert half.report["validation"]["first_divergent_kernel"] is None  # kernel by kernel at the same tolerance
    assert out["tolerance"]["atol"] == pytest.approx(8 * eps) and f"precision {precision}" in out["tolerance"]["why"]
    assert half.report["precision"]["requested"] and half.report["precision"]["accumulation"] == "float32"
    assert half.metadata["weights_bytes"] <= 0.55 * full.metadata["weights_bytes"]
    # The weights really were rounded: the result moves off the float32 one, by about the format's epsilon.
    x = {"x": rng.standard_normal((4, 256)).astype(np.float32)}
    with full.load() as a, half.load() as b:
        ya, yb = a.run(x)["y"], b.run(x)["y"]
    assert 0 < np.max(np.abs(ya - yb)) <= 8 * eps * (1 + np.max(np.abs(ya)))


def test_a_bfloat16_model_stores_bfloat16_weights():
    art = compiled(mlp(TensorProto.BFLOAT16))
    assert art.metadata["precision"] == "bf16" and art.report["precision"]["weights_bytes_by_dtype"]["bfloat16"] >= W.size * 2
    assert "skipped" in art.report["validation"] or art.report["validation"]["passed"]


def test_fp32_keeps_a_float16_model_s_weights_float32():
    art = compiled(mlp(TensorProto.FLOAT16), precision="fp32")
    assert art.report["precision"]["weights_bytes_by_dtype"]["float32"] == W.size * 4  # the Add reads its float16 bias
    assert art.report["validation"]["passed"] and art.report["validation"]["outputs"][0]["dtype"] == "float16"


def test_a_float32_model_s_weights_stay_float32_by_default():
    """Even weights that are exactly float16 values: a float32 compile's kernels and report do not change."""
    exact = onnx.load_from_string(mlp())
    exact.graph.initializer[0].CopyFrom(numpy_helper.from_array(W.astype(np.float16).astype(np.float32), "w"))
    art = compiled(exact.SerializeToString())
    assert art.metadata["precision"] == "fp32" and set(art.report["precision"]["weights_bytes_by_dtype"]) == {"float32"}
    assert art.report["validation"]["outputs"][0]["tolerance"]["atol"] == pytest.approx(1e-4)  # the float32 rule


def test_model_precision_is_half_only_when_every_weight_is():
    assert model_precision(import_onnx(mlp())) == "fp32"
    assert model_precision(import_onnx(mlp(TensorProto.FLOAT16))) == "fp16"
    assert model_precision(import_onnx(mlp(TensorProto.BFLOAT16))) == "bf16"
    mixed = import_onnx(mlp(TensorProto.FLOAT16))  # a layer kept in float32 keeps its exact weights
    mixed = mixed.replace(constants={**mixed.constants, "extra": W}, types={**mixed.types, "extra": TensorType(W.shape, "float32")})
    assert model_precision(mixed) == "fp32"


def test_bad_precisions_are_one_clear_error():
    with pytest.raises(PrecisionError, match="fp32, fp16, bf16, int8") as err:
        compiled(mlp(), precision="fp8")
    assert err.value.code == "bad_precision"
    with pytest.raises(KilnError, match="int8 needs calibration samples") as err:
        compiled(mlp(), precision="int8")
    assert err.value.code == "bad_calibration"
    with pytest.raises(PrecisionError, match="for precision int8 only"):
        compiled(mlp(), precision="fp16", calibration="samples.npz")
    # a target whose kernels widen no narrow float (every named one does now: cuda feeds them to its tensor cores)
    with pytest.raises(PrecisionError, match="cannot store weights as float16"):
        store_weights(import_onnx(mlp()), "fp16", True, (), get_target("cuda"))
    # with input-shape ranges: tests/core/driver/test_shape_lengths.py


def test_a_float16_shared_model_has_half_the_weights_and_validates(models_dir):
    from onnxconverter_common import float16

    path = models_dir / "squeezenet1_1.onnx"
    with pytest.warns(UserWarning):  # "the float32 number ... will be truncated to 1e-07": what float16 holds
        model = float16.convert_float_to_float16(onnx.load(path), keep_io_types=False)
    art = compiled(model)
    val = art.report["validation"]
    assert val["passed"] and val["reference"] == "onnxruntime" and val["outputs"][0]["dtype"] == "float16"
    # Against the float32 artifact, not the ONNX file: blocked layouts and Winograd transform weights in both.
    assert art.metadata["weights_bytes"] <= 0.52 * compiled(onnx.load(path)).metadata["weights_bytes"]


def test_weights_a_kernel_reads_as_scalars_widen_once_and_still_match():
    """An NCHW conv with two output channels broadcasts each weight: it widens them into a workspace per call."""
    weight = rng.standard_normal((2, 64, 3, 3)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "conv",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 10, 10])],
                              [numpy_helper.from_array(weight, "w")])
    art = compiled(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), precision="fp16")
    assert art.report["validation"]["passed"] and art.report["precision"]["weights_bytes_by_dtype"]["float16"] == weight.size * 2
