"""Requantize, DequantizeLinear and QuantizeLinear kernels against numpy (Requantize in MLAS's order: float32
product, half-to-even rounding, saturation), at the edges: int32 extremes, ties, zero points at the ends of
their ranges, fused Relu clamps, per-channel multipliers; DQ/Q against ONNX Runtime."""
from __future__ import annotations

import numpy as np
import pytest

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import get_op
from tests.helpers.kernel_runs import Case, assert_matches, onnx_reference, run_cases

rng = np.random.default_rng(8)
RANGES = {"int8": (-128, 127), "uint8": (0, 255)}


def numpy_requantize(acc, multiplier, to, zero, lo=None, hi=None):
    """Independent reference: float32(acc) * m rounded half to even (np.rint), + zp, saturated."""
    dtype_lo, dtype_hi = RANGES[to]
    lo, hi = dtype_lo if lo is None else lo, dtype_hi if hi is None else hi
    scaled = acc.astype(np.float32) * multiplier.astype(np.float32)
    rounded = np.rint(scaled.astype(np.float64)) + zero  # float64: no overflow for any int32 * m
    return np.clip(rounded, lo, hi).astype(to)


def requantize_case(cid, acc, multiplier, to, zero, lo=None, hi=None):
    dtype_lo, dtype_hi = RANGES[to]
    attrs = dict(to=to, zero_point=zero, min=dtype_lo if lo is None else lo, max=dtype_hi if hi is None else hi)
    return Case(cid, "Requantize", [acc, multiplier], attrs,
                lambda: [numpy_requantize(acc, multiplier, to, zero, lo, hi)], unscheduled_too=True)


EDGES = np.array([-2 ** 31, -2 ** 31 + 1, -70000, -257, -256, -255, -129, -128, -3, -1, 0, 1, 3, 127, 128, 255, 256,
                  70000, 2 ** 31 - 1], np.int32)
TIES = np.arange(-9, 10, dtype=np.int32)  # times 0.5: every odd value is a tie (half to even: 0.5 -> 0, 1.5 -> 2)

CASES = [
    requantize_case("edges_u8_zp0", EDGES, np.float32(0.37), "uint8", 0),
    requantize_case("edges_u8_zp255", EDGES, np.float32(0.37), "uint8", 255),
    requantize_case("edges_s8_zp-128", EDGES, np.float32(1.0), "int8", -128),
    requantize_case("edges_s8_zp127", EDGES, np.float32(0.01), "int8", 127),
    requantize_case("ties_s8", TIES, np.float32(0.5), "int8", 0),
    requantize_case("ties_u8_zp3", TIES, np.float32(0.5), "uint8", 3),
    requantize_case("relu_u8", rng.integers(-5000, 5000, (2, 3, 4, 5)).astype(np.int32), np.float32(0.02),
                    "uint8", 100, lo=100),
    requantize_case("clip_s8", rng.integers(-5000, 5000, (2, 3, 4, 5)).astype(np.int32), np.float32(0.02),
                    "int8", -5, lo=-5, hi=60),
    requantize_case("per_channel_nchw", rng.integers(-40000, 40000, (2, 6, 3, 3)).astype(np.int32),
                    rng.uniform(1e-4, 5e-3, (6, 1, 1)).astype(np.float32), "uint8", 128),
    requantize_case("per_column", rng.integers(-40000, 40000, (7, 10)).astype(np.int32),
                    rng.uniform(1e-4, 5e-3, (10,)).astype(np.float32), "int8", 0),
]


@pytest.fixture(scope="module")
def outputs():
    return run_cases(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_requantize_matches_numpy(case, outputs):
    expected = case.reference()
    for got in outputs[case.id]:  # scheduled and the naive schedule
        assert_matches(case, got, expected)


def test_requantize_reference_is_the_op_fold():
    acc, m = EDGES, np.float32(0.37)
    fold = get_op("Requantize").fold([acc, m], dict(to="uint8", zero_point=7, min=0, max=255))[0]
    np.testing.assert_array_equal(fold, numpy_requantize(acc, m, "uint8", 7))


@pytest.mark.parametrize("attrs", [dict(to="int16", zero_point=0, min=0, max=1),
                                   dict(to="uint8", zero_point=0, min=10, max=5),
                                   dict(to="int8", zero_point=200, min=-128, max=127)])
def test_requantize_refuses_bad_attributes(attrs):
    with pytest.raises(ShapeError, match="Requantize"):
        get_op("Requantize").infer([TensorType((2,), "int32"), TensorType((), "float32")], attrs)


def _quantize_cases():
    x = (rng.standard_normal((2, 4, 3, 3)) * 3).astype(np.float32)
    x.flat[:6] = [0.5, 1.5, 2.5, -0.5, -1.5, 1000.0]  # ties at scale 1 and a saturating value
    scale_axis = rng.uniform(0.01, 0.1, 4).astype(np.float32)
    cases = []
    for dtype, zero in (("uint8", 255), ("uint8", 0), ("int8", -128), ("int8", 3)):
        for scale, axis in ((np.array(1.0, np.float32), 0), (np.array(0.02, np.float32), 0), (scale_axis, 1)):
            zp = np.full(np.shape(scale), zero, dtype)
            onnx_attrs = dict(axis=axis) if np.ndim(scale) else {}
            cases.append(Case(f"q_{dtype}_{zero}_{np.ndim(scale)}_{float(np.ravel(scale)[0]):g}", "QuantizeLinear",
                              [x, scale, zp], dict(axis=axis),
                              lambda x=x, s=scale, z=zp, a=onnx_attrs: onnx_reference("QuantizeLinear", [x, s, z], a)))
            q = rng.integers(*RANGES[dtype], size=(2, 4, 3, 3), endpoint=True).astype(dtype)
            cases.append(Case(f"dq_{dtype}_{zero}_{np.ndim(scale)}_{float(np.ravel(scale)[0]):g}", "DequantizeLinear",
                              [q, scale, zp], dict(axis=axis),
                              lambda q=q, s=scale, z=zp, a=onnx_attrs: onnx_reference("DequantizeLinear", [q, s, z], a),
                              rtol=0, atol=0))
    return cases


QDQ_CASES = _quantize_cases()


def test_quantize_and_dequantize_match_onnxruntime():
    results = run_cases(QDQ_CASES)
    for case in QDQ_CASES:
        for got in results[case.id]:
            assert_matches(case, got, case.reference())
