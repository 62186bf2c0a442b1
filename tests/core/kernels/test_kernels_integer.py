"""MatMulInteger and ConvInteger kernels against numpy integer references (int64 sums, exact):
u8/s8 data, per-tensor and per-channel zero points at the ends of their ranges, saturated operands
(255, -128, 127) and long K sums, convs with pads, strides, dilations, groups and depthwise."""
from __future__ import annotations

import numpy as np
import pytest

from core.graph.op_defs.integer import conv_integer_reference, matmul_integer_reference
from tests.backend_calls import runs_on_host
from tests.helpers.kernel_runs import Case, assert_matches, run_cases

rng = np.random.default_rng(21)
LIMITS = {"uint8": (0, 255), "int8": (-128, 127)}


def operand(shape, dtype, fill=None):
    lo, hi = LIMITS[dtype]
    if fill == "max":
        return np.full(shape, hi, dtype)
    if fill == "min":
        return np.full(shape, lo, dtype)
    return rng.integers(lo, hi + 1, shape).astype(dtype)


def zero(dtype, where, channels=None):
    lo, hi = LIMITS[dtype]
    value = {"lo": lo, "hi": hi, "mid": (lo + hi) // 2}[where] if isinstance(where, str) else where
    if channels:
        return rng.integers(lo, hi + 1, channels).astype(dtype)
    return np.array(value, dtype)


def mm(cid, a_shape, b_shape, a_dtype="uint8", b_dtype="int8", a_zero=None, b_zero=None, fill=(None, None),
       per_column=False, both=False):
    a, b = operand(a_shape, a_dtype, fill[0]), operand(b_shape, b_dtype, fill[1])
    inputs = [a, b]
    if a_zero is not None or b_zero is not None:
        inputs.append(zero(a_dtype, a_zero if a_zero is not None else 0))
    if b_zero is not None:
        inputs.append(zero(b_dtype, b_zero, b_shape[-1] if per_column else None))
    return Case(f"MatMulInteger_{cid}", "MatMulInteger", inputs, {}, lambda: matmul_integer_reference(inputs, {}),
                unscheduled_too=both)


def conv(cid, x_shape, w_shape, x_dtype="uint8", w_dtype="int8", x_zero="mid", w_zero=None, per_channel=False,
         strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1, fill=(None, None)):
    x, w = operand(x_shape, x_dtype, fill[0]), operand(w_shape, w_dtype, fill[1])
    inputs = [x, w, zero(x_dtype, x_zero)]
    if w_zero is not None or per_channel:
        inputs.append(zero(w_dtype, w_zero or 0, w_shape[0] if per_channel else None))
    attrs = {"strides": strides, "pads": pads, "dilations": dilations, "group": group}
    return Case(f"ConvInteger_{cid}", "ConvInteger", inputs, attrs, lambda: conv_integer_reference(inputs, attrs))


CASES = [
    mm("plain", (5, 7), (7, 9), both=True),
    mm("u8_zero_hi", (6, 32), (32, 16), a_zero="hi", b_zero="lo", both=True),
    mm("s8_s8", (4, 24), (24, 20), a_dtype="int8", a_zero="lo", b_zero="hi"),
    mm("u8_u8_per_column", (3, 16), (16, 10), b_dtype="uint8", a_zero=7, b_zero=0, per_column=True),
    # Every product at its extreme: 255 * -128 (and 0 - 255 shifted) summed over a long K stays exact.
    mm("saturated_long_k", (2, 4096), (4096, 17), fill=("max", "min"), both=True),
    mm("s8_min_times_min", (3, 2048), (2048, 5), a_dtype="int8", fill=("min", "min"), a_zero="hi", b_zero="hi"),
    mm("batched", (2, 3, 8, 12), (12, 32), a_zero="mid", b_zero=3, per_column=True),
    mm("one_row", (1, 512), (512, 100), a_zero=128, b_zero=0),
    conv("3x3_pads", (1, 8, 9, 9), (16, 8, 3, 3), pads=(1, 1, 1, 1)),
    conv("per_channel_strides", (2, 4, 11, 10), (6, 4, 3, 3), w_zero=0, per_channel=True, strides=(2, 2),
         pads=(1, 0, 2, 1)),
    conv("s8_dilated", (1, 3, 12, 12), (5, 3, 3, 3), x_dtype="int8", x_zero="lo", w_zero="hi", dilations=(2, 2)),
    conv("pointwise", (1, 32, 7, 7), (24, 32, 1, 1), x_zero=0),
    conv("grouped", (1, 8, 8, 8), (8, 4, 3, 3), group=2, pads=(1, 1, 1, 1)),
    conv("depthwise_saturated", (1, 16, 10, 10), (16, 1, 3, 3), pads=(1, 1, 1, 1), group=16, x_zero="lo",
         fill=("max", "min")),
    conv("u8_weights", (1, 4, 6, 6), (4, 4, 2, 2), w_dtype="uint8", w_zero="hi"),
    # Depthwise (core/kernels/integer_depthwise.py: an int16 shifted plane per channel): the shifted data's
    # ends (255 - 0, -128 - 127) in the int16 pad, strides with uneven pads, per-channel weight zero points.
    conv("depthwise_s2_per_channel", (2, 24, 13, 11), (24, 1, 3, 3), x_zero="lo", per_channel=True,
         strides=(2, 2), pads=(1, 0, 2, 1), group=24, fill=("max", None)),
    conv("depthwise_s8_dilated", (1, 8, 12, 9), (8, 1, 3, 3), x_dtype="int8", x_zero="hi", w_zero="lo",
         dilations=(2, 2), pads=(2, 1, 0, 2), group=8, fill=("min", "max")),
    conv("depthwise_5x5_u8_weights", (1, 12, 17, 17), (12, 1, 5, 5), w_dtype="uint8", w_zero="hi",
         pads=(2, 2, 2, 2), group=12, x_zero="hi"),
]


@pytest.fixture(scope="module")
def results():
    return run_cases(CASES, "x86-64-v3")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_integer_kernels_match_numpy(case, results):
    expected = case.reference()
    for outputs in results[case.id]:
        assert_matches(case, outputs, expected)


def test_reference_is_exact_at_the_extremes():
    # The numpy reference itself: 4096 products of 255 * -128 are -133693440, inside int32.
    a, b = np.full((1, 4096), 255, np.uint8), np.full((4096, 1), -128, np.int8)
    assert matmul_integer_reference([a, b], {})[0][0, 0] == 4096 * 255 * -128


# The packed (tensorized) kernels pack_int8_weights makes, on the exact AVX2 intrinsics (every x86-64-v3 host)
# and on the best one this host has: convs over all window attributes, channels not a multiple of 4.
def packed_conv(cid, x_shape, w_shape, x_dtype="uint8", x_zero="mid", strides=(1, 1), pads=(0, 0, 0, 0),
                dilations=(1, 1), fill=(None, None)):
    from core.packing.int8 import column_correction, conv_weights_as_columns, pack_dot_weights

    x, w = operand(x_shape, x_dtype, fill[0]), operand(w_shape, "int8", fill[1])
    zero_point = zero(x_dtype, x_zero)
    attrs = {"strides": strides, "pads": pads, "dilations": dilations, "group": 1}

    def case(intrinsic):
        data = intrinsic.inputs[0].dtype  # int16 data holds either 8-bit type as it is
        shift = 0 if x_dtype == data or data == "int16" else (128 if x_dtype == "int8" else -128)
        b = conv_weights_as_columns(w)
        inputs = [x, pack_dot_weights(b, intrinsic.lanes, intrinsic.depth),
                  column_correction(b, int(zero_point) + shift)]
        packed_attrs = {"kernel": w_shape[2:], "strides": strides, "pads": pads, "dilations": dilations,
                        "columns": w_shape[0], "data_zero_point": int(zero_point), "data_shift": shift,
                        "intrinsic": intrinsic.name}
        return Case(f"ConvIntegerPacked_{cid}_{intrinsic.name}", "ConvIntegerPacked", inputs, packed_attrs,
                    lambda: conv_integer_reference([x, w, zero_point], attrs))

    return case


PACKED_CONVS = [
    packed_conv("3x3_pads", (1, 8, 9, 9), (16, 8, 3, 3), pads=(1, 1, 1, 1)),
    packed_conv("rgb_strided", (2, 3, 11, 10), (20, 3, 3, 3), x_dtype="int8", x_zero="lo", strides=(2, 2),
                pads=(1, 0, 2, 1)),
    packed_conv("pointwise_saturated", (1, 32, 7, 7), (24, 32, 1, 1), x_zero="lo", fill=("max", "min")),
    packed_conv("dilated", (1, 5, 12, 12), (7, 5, 3, 3), pads=(2, 2, 2, 2), dilations=(2, 2), x_zero="hi"),
    # 13 and 11 output columns: the dot computes 14 and 12 (whole register tiles), the epilogue writes 13 and 11
    packed_conv("widened_columns", (1, 16, 3, 13), (16, 16, 1, 1), x_zero="hi", fill=("max", None)),
    packed_conv("widened_padded", (1, 4, 5, 11), (8, 4, 3, 3), pads=(1, 1, 1, 1), x_dtype="int8", x_zero="lo"),
]


def _packed_targets():
    from core.target import get_target
    from core.te.intrinsics import intrinsics_for

    found = []
    for spec in ("x86-64-v3", "native"):
        target = get_target(spec)
        exact = lambda i: i.weight_dtype == "int8" and i.weight_limit is None  # noqa: E731 (full-range weights)
        dots = intrinsics_for(target, exact) if runs_on_host(target) else []
        for dot in dots if spec == "x86-64-v3" else dots[:1]:  # every exact AVX2 lowering; the host's best
            if dot.name not in [d.name for _, d in found]:
                found.append((spec, dot))
    return found


@pytest.mark.parametrize("spec,intrinsic", _packed_targets() or [pytest.param(None, None, marks=pytest.mark.skip(
    reason="no 8-bit dot-product intrinsic runs here"))], ids=lambda v: getattr(v, "name", v))
def test_packed_convs_match_numpy(spec, intrinsic):
    cases = [make(intrinsic) for make in PACKED_CONVS]
    results = run_cases(cases, spec)
    for case in cases:
        assert_matches(case, results[case.id][0], case.reference())
