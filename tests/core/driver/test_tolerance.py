"""The validation tolerance policy: per dtype, scale, quantization step and index outputs; user tolerances."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from core.driver.tolerance import OutputOrigin, output_origins, parse_tolerance, tolerance_for
from core.driver.validate import compare_output
from core.errors import ValidationInputError


def test_float32_is_scale_aware_so_a_cancellation_in_a_huge_output_passes():
    ref = np.array([1e10, -1e10, 3.0], dtype=np.float32)
    got = ref + np.array([1e5, 0, 5e3], dtype=np.float32)  # 5e3 off where ref is 3: cancellation, tiny vs the scale
    assert compare_output("y", got, ref, tolerance_for(np.float32)).passed
    assert not compare_output("y", got, ref, tolerance_for(np.float32, user=(1e-4, 1e-4))).passed


def test_float16_allows_a_few_ulps_and_float32_does_not():
    ref = np.linspace(-4, 4, 64).astype(np.float16)
    one_ulp = np.nextafter(ref, np.float16(np.inf))
    assert compare_output("y", one_ulp, ref, tolerance_for(np.float16)).passed
    assert not compare_output("y", one_ulp.astype(np.float32), ref.astype(np.float32), tolerance_for(np.float32)).passed
    assert not compare_output("y", ref + np.float16(0.5), ref, tolerance_for(np.float16)).passed


def test_bfloat16_uses_its_own_epsilon():
    assert tolerance_for(np.dtype("bfloat16")).atol == pytest.approx(8 * 2.0 ** -7)
    assert tolerance_for(np.float32, OutputOrigin(narrow="bfloat16")).atol == pytest.approx(8 * 2.0 ** -7)


def test_integers_and_bools_are_exact_and_index_outputs_allow_a_stated_fraction():
    ref = np.arange(200, dtype=np.int64)
    got = ref.copy()
    got[0] += 1
    assert not compare_output("i", got, ref, tolerance_for(np.int64)).passed
    assert not compare_output("b", ref % 2 == 0, ref % 3 == 0, tolerance_for(np.bool_)).passed
    index = tolerance_for(np.int64, OutputOrigin(index_op="ArgMax"))
    assert compare_output("i", got, ref, index).passed  # 1 of 200 differs: within 1%
    got[1:4] += 1
    assert not compare_output("i", got, ref, index).passed


def test_quantized_outputs_allow_one_step():
    ref = np.arange(10, dtype=np.float32) * 0.05
    tol = tolerance_for(np.float32, OutputOrigin(step=0.05))
    assert compare_output("q", ref + 0.05, ref, tol).passed and not compare_output("q", ref + 0.11, ref, tol).passed
    ints = tolerance_for(np.int8, OutputOrigin(step=0.05, quantized_ints=True))
    assert compare_output("q", np.int8([1, 2]), np.int8([0, 2]), ints).passed


def test_classifier_outputs_get_cosine_and_top_k_agreement():
    ref = np.random.default_rng(0).standard_normal((3, 10)).astype(np.float32)
    got = ref.copy()
    got[0, np.argmax(ref[0])] -= 10  # row 0's top class falls to the bottom of Kiln's ranking
    result = compare_output("logits", got, ref, tolerance_for(np.float32))
    assert result.top1 == pytest.approx(2 / 3) and result.top5 == pytest.approx(2 / 3)
    assert 0 < result.cosine < 1 and not result.passed


def test_origins_come_from_the_onnx_producers():
    scale = numpy_helper.from_array(np.array(0.25, dtype=np.float32), "s")
    zero = numpy_helper.from_array(np.array(0, dtype=np.int8), "z")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"]),
             helper.make_node("Identity", ["dq"], ["out"]),
             helper.make_node("ArgMax", ["x"], ["idx"], axis=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 4]),
                               helper.make_tensor_value_info("q", TensorProto.INT8, [2, 4]),
                               helper.make_tensor_value_info("idx", TensorProto.INT64, [2, 1])], [scale, zero])
    origins = output_origins(helper.make_model(graph))
    assert origins["out"] == OutputOrigin(step=0.25, quantized_model=True)
    assert origins["q"] == OutputOrigin(step=0.25, quantized_ints=True, quantized_model=True)
    assert origins["idx"] == OutputOrigin(index_op="ArgMax", quantized_model=True)


def test_a_quantized_model_allows_a_few_carried_steps_and_no_more():
    """The int8 bar: the elementwise rule on >= 99.9% of elements; index outputs keep their own rule."""
    tol = tolerance_for(np.float32, OutputOrigin(step=0.5, quantized_model=True))
    assert tol.outlier_fraction == 0.001 and tol.atol == pytest.approx(0.5 + 1e-4)
    ref = np.zeros(10_000, np.float32)
    assert compare_output("y", ref + np.r_[np.full(10, 3.0), np.zeros(9_990)].astype(np.float32), ref, tol).passed
    assert not compare_output("y", ref + np.r_[np.full(11, 3.0), np.zeros(9_989)].astype(np.float32), ref, tol).passed
    assert tolerance_for(np.int64, OutputOrigin(index_op="ArgMax", quantized_model=True)).outlier_fraction is None
    assert tolerance_for(np.float32, OutputOrigin(quantized_model=True), user=(1e-3, 1e-3)).outlier_fraction is None


@pytest.mark.parametrize("text", ["", "a", "1,2,3", "-1", "nan", "1e-3,inf"])
def test_a_bad_tolerance_is_one_clear_error(text):
    with pytest.raises(ValidationInputError, match="bad tolerance"):
        parse_tolerance(text)


def test_tolerance_parses_atol_and_rtol():
    assert parse_tolerance("1e-3") == (1e-3, 1e-3) and parse_tolerance("1e-3, 0") == (1e-3, 0.0)
