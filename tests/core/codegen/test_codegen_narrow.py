"""Narrow dtypes in generated code (float8, float4, e8m0, int4/int2): conversions bit-exact with ml_dtypes
(ONNX's reference for e8m0), scalar and vectorized, and arithmetic rounded back to the format."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx.numpy_helper
import pytest

from core.narrow_dtypes import MINIFLOATS, SUBBYTE_INTS
from core.tir import ForKind, cast

SIGNED_MINIFLOATS = [name for name, fmt in MINIFLOATS.items() if fmt.signed]
KINDS = [ForKind.SERIAL, ForKind.VECTORIZED]


def _every_value(dtype: str) -> np.ndarray:
    codes = np.arange(1 << MINIFLOATS[dtype].bits, dtype=np.uint8)
    return codes.view(np.dtype(dtype))


def _probe_floats(dtype: str) -> np.ndarray:
    """Every representable value, the midpoints between neighbours (ties: round to even), values just off
    the midpoints, random values over the whole range, and the special values."""
    values = np.unique(_every_value(dtype).astype(np.float32))
    values = values[np.isfinite(values)]
    mids = (values[:-1] + values[1:]) / 2
    rng = np.random.default_rng(3)
    top = float(values.max())
    probes = [values, mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf)),
              rng.uniform(-top * 1.2, top * 1.2, 200).astype(np.float32),
              (rng.standard_normal(200) * 2.0 ** rng.integers(-20, 8, 200)).astype(np.float32),
              np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 1e-30, -1e-30, top * 1.07], np.float32)]
    return np.concatenate(probes).astype(np.float32)


def _same_bits(out: np.ndarray, ref: np.ndarray) -> None:
    np.testing.assert_array_equal(out.view(np.uint8), ref.view(np.uint8))


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.value)
@pytest.mark.parametrize("dtype", SIGNED_MINIFLOATS)
def test_float32_to_minifloat_matches_ml_dtypes(run_elementwise, dtype, kind):
    x = _probe_floats(dtype)
    out = run_elementwise(lambda a: cast(dtype, a), [x], dtype, kind)
    _same_bits(out, x.astype(dtype))


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.value)
@pytest.mark.parametrize("dtype", list(MINIFLOATS))
def test_minifloat_to_float32_is_exact(run_elementwise, dtype, kind):
    x = _every_value(dtype)
    out = run_elementwise(lambda a: cast("float32", a), [x], "float32", kind)
    np.testing.assert_array_equal(out, x.astype(np.float32))  # NaN == NaN here


def test_float32_to_e8m0_rounds_up_like_onnx(run_elementwise):
    x = np.concatenate([_every_value("float8_e8m0fnu").astype(np.float32)[:-1] * 1.3, np.float32([
        0, -0.0, 0.124, 0.25, 1.1, -3.0, 2.0 ** 127 * 1.5, np.finfo(np.float32).max, np.inf, np.nan, 1e-40])])
    x = x.astype(np.float32)
    out = run_elementwise(lambda a: cast("float8_e8m0fnu", a), [x], "float8_e8m0fnu")
    _same_bits(out, onnx.numpy_helper.to_float8e8m0(x, saturate=True, round_mode="up"))


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2", "float4_e2m1fn"])
def test_arithmetic_rounds_to_the_format(run_elementwise, dtype):
    rng = np.random.default_rng(5)
    a = rng.standard_normal(64).astype(dtype)
    b = rng.standard_normal(64).astype(dtype)
    out = run_elementwise(lambda x, y: x * y + x, [a, b], dtype)
    af, bf = a.astype(np.float32), b.astype(np.float32)
    ref = ((af * bf).astype(dtype).astype(np.float32) + af).astype(dtype)
    _same_bits(out, ref)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.value)
@pytest.mark.parametrize("dtype", list(SUBBYTE_INTS))
def test_subbyte_ints_wrap_and_store_low_bits(run_elementwise, dtype, kind):
    x = np.arange(-20, 21, dtype=np.int32)
    out = run_elementwise(lambda a: cast(dtype, a), [x], dtype, kind)
    _same_bits(out, x.astype(dtype))  # ml_dtypes wraps and keeps zeros above the value bits
    back = run_elementwise(lambda a: cast("int32", a), [x.astype(dtype)], "int32", kind)
    np.testing.assert_array_equal(back, x.astype(dtype).astype(np.int32))


@pytest.mark.parametrize("dtype", ["int4", "uint4"])
def test_float_to_subbyte_truncates_then_wraps(run_elementwise, dtype):
    x = np.array([-9.0, -8.5, -1.5, -0.5, 0.5, 7.9, 8.0, 15.5, 16.0, 100.0], np.float32)
    out = run_elementwise(lambda a: cast(dtype, a), [x], dtype)
    _same_bits(out, x.astype(dtype))


def test_float4_nan_and_overflow_saturate_like_ml_dtypes(run_elementwise):
    x = np.array([np.nan, -np.nan, np.inf, -np.inf, 7.0, -100.0, 0.25, 0.75], np.float32)
    out = run_elementwise(lambda a: cast("float4_e2m1fn", a), [x], "float4_e2m1fn")
    _same_bits(out, x.astype(ml_dtypes.float4_e2m1fn))
