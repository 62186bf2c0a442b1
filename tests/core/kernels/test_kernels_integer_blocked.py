"""Channels-last 8-bit conv kernels (DepthwiseConvIntegerNCHWc, ConvIntegerPackedNCHWc) against numpy integer
references on the NCHW operands: saturated data (255, -128) with zero points at the other end, strides, uneven
pads, dilations, channel counts that are not whole vectors, and packed output channels padded to whole blocks."""
from __future__ import annotations

import numpy as np
import pytest

from core.graph.op_defs.integer import conv_integer_reference
from tests.backend_calls import runs_on_host
from core.graph.op_defs.integer_blocked import to_channels_last
from tests.helpers.kernel_runs import Case, assert_matches, run_cases
from core.packing.int8 import column_correction, conv_weights_as_columns, pack_dot_weights
from core.target import get_target

TARGET = get_target("x86-64-v3")
# Exact for any s8 weights, on every x86-64-v3 host: 8-bit data widened per call, and int16 data (vpmaddwd, 2 deep)
INTRINSIC, WORDS = "x86_avx2_u8s8_8x4", "x86_avx2_s16s8_8x2"
rng = np.random.default_rng(33)
pytestmark = pytest.mark.skipif(not runs_on_host(TARGET), reason="needs an AVX2 host")
LIMITS = {"uint8": (0, 255), "int8": (-128, 127)}


def data(shape, dtype, fill=None):
    lo, hi = LIMITS[dtype]
    if fill:
        return np.full(shape, {"max": hi, "min": lo}[fill], dtype)
    return rng.integers(lo, hi + 1, shape).astype(dtype)


def blocked(x: np.ndarray, block: int) -> np.ndarray:
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


def depthwise(cid, shape, kernel=(3, 3), dtype="uint8", x_zero=128, w_zero=None, fill=None, strides=(1, 1),
              pads=(1, 1, 1, 1), dilations=(1, 1)):
    c = shape[1]
    x, w = data(shape, dtype, fill), data((c, 1, *kernel), "int8", "min" if fill else None)
    w_zeros = np.asarray(w_zero if w_zero is not None else rng.integers(-128, 128, c), np.int8)
    taps = (w.astype(np.int32) - w_zeros.astype(np.int32).reshape(-1, 1, 1, 1))[:, 0].transpose(1, 2, 0)
    zero = np.array(x_zero, dtype)
    attrs = {"strides": strides, "pads": pads, "dilations": dilations}
    want = conv_integer_reference([x, w, zero, w_zeros], dict(attrs, group=c))[0]
    inputs = [to_channels_last(x), np.ascontiguousarray(taps), zero]
    return Case(f"depthwise_{cid}", "DepthwiseConvIntegerNCHWc", inputs, attrs, lambda: [to_channels_last(want)],
                rtol=0, atol=0)


def packed(cid, shape, o, kernel=(1, 1), in_block=0, x_zero=3, fill=None, strides=(1, 1), pads=(0, 0, 0, 0),
           dtype="uint8", intrinsic=INTRINSIC):
    """int8 data is shifted by 128 into the uint8 intrinsic's data (pack_int8_weights' data_shift); int16 data holds
    it as it is."""
    x, w = data(shape, dtype, fill), data((o, shape[1], *kernel), "int8", "min" if fill else None)
    columns, shift = conv_weights_as_columns(w), 128 if dtype == "int8" and intrinsic == INTRINSIC else 0
    attrs = {"kernel": kernel, "strides": strides, "pads": pads, "dilations": (1, 1), "columns": o,
             "data_zero_point": x_zero, "data_shift": shift, "intrinsic": intrinsic, "in_block": in_block}
    want = conv_integer_reference([x, w, np.array(x_zero, dtype)], {"strides": strides, "pads": pads,
                                                                    "dilations": (1, 1), "group": 1})[0]
    depth = 2 if intrinsic == WORDS else 4
    inputs = [blocked(x, in_block) if in_block else x, pack_dot_weights(columns, 8, depth),
              column_correction(columns, x_zero + shift)]
    return Case(f"packed_{cid}" + ("_words" if intrinsic == WORDS else ""), "ConvIntegerPackedNCHWc", inputs, attrs, lambda: [to_channels_last(want)],
                rtol=0, atol=0)


CASES = [
    depthwise("u8_saturated", (1, 32, 9, 10), x_zero=0, w_zero=127, fill="max"),  # 255 * (-128 - 127) per tap
    depthwise("s8_saturated_stride2", (1, 16, 11, 13), dtype="int8", x_zero=127, fill="min", strides=(2, 2),
              pads=(1, 0, 2, 1)),
    depthwise("dilated_12_channels", (2, 12, 10, 9), x_zero=255, dilations=(2, 2), pads=(2, 2, 0, 1)),
    depthwise("5x5_24_channels", (1, 24, 8, 8), kernel=(5, 5), pads=(2, 2, 2, 2)),
    packed("nchw_in_padded_columns", (1, 12, 5, 7), 20),  # 20 channels: the last block of 8 is half padding
    packed("blocked_in", (1, 16, 6, 6), 16, in_block=8, x_zero=255, fill="max"),
    packed("channels_last_3x3_stride2", (1, 8, 9, 7), 24, kernel=(3, 3), in_block=8, strides=(2, 2),
           pads=(1, 1, 1, 1)),
    packed("widened_13_columns", (1, 8, 4, 13), 16, in_block=8, x_zero=255, fill="max"),
    packed("s8_data_saturated_pads", (1, 8, 5, 6), 8, kernel=(3, 3), in_block=8, x_zero=127, fill="min",
           pads=(1, 2, 0, 1), dtype="int8"),
    # More weight bytes than data bytes: column blocks outermost, each output tile's accumulators local
    packed("weights_outer_tiles", (1, 32, 4, 4), 24, kernel=(3, 3), in_block=8, pads=(1, 1, 1, 1), x_zero=255,
           fill="max"),
    packed("blocked_in", (1, 16, 6, 6), 16, in_block=8, x_zero=255, fill="max", intrinsic=WORDS),
    packed("channels_last_3x3_stride2", (1, 8, 9, 7), 24, kernel=(3, 3), in_block=8, strides=(2, 2),
           pads=(1, 1, 1, 1), intrinsic=WORDS),
    packed("s8_data_saturated_pads", (1, 8, 5, 6), 8, kernel=(3, 3), in_block=8, x_zero=127, fill="min",
           pads=(1, 2, 0, 1), dtype="int8", intrinsic=WORDS),
    packed("nchw_in_padded_columns", (1, 12, 5, 7), 20, intrinsic=WORDS),
]


@pytest.fixture(scope="module")
def results():
    return run_cases(CASES, TARGET)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_channels_last_integer_convs_match_numpy(case, results):
    outputs = results[case.id][0]
    assert outputs[0].dtype == np.int32
    assert_matches(case, outputs, case.reference())


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_constant_folding_computes_the_same(case):
    from core.graph.ops import get_op

    np.testing.assert_array_equal(get_op(case.op).fold(case.inputs, case.attrs)[0], case.reference()[0])


def test_exact_output_tiles_accumulate_in_a_local_tile():
    """Tiles that divide the output: the int32 dot is a per-tile local buffer, not a whole-output workspace; padded
    channels keep the workspace (the epilogue skips the padding)."""
    from tests.helpers.kernel_runs import OpKernel
    from core.target import get_target

    def workspaces(case):
        func = OpKernel("k", case.op, case.inputs, case.attrs).lower(get_target(TARGET))
        return [p.name for p in func.params if p.name == "int8_dot"]

    by_id = {c.id: c for c in CASES}
    assert workspaces(by_id["packed_weights_outer_tiles"]) == []
    assert workspaces(by_id["packed_nchw_in_padded_columns"]) == ["int8_dot"]
