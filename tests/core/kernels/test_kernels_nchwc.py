"""Blocked-layout kernels: Conv2dNCHWc against Kiln's NCHW Conv kernel (dense, 1x1, strided, widened
odd widths, depthwise, tuned tiles), LayoutTransform and the blocked pools against their folds."""
from __future__ import annotations

import numpy as np
import pytest

from core.graph.ops import get_op
from core.kernels.schedules.conv2d_nchwc import schedule_conv2d_nchwc
from core.kernels.testing import OpKernel, build_kernels
from core.packing.blocked import block_for, from_blocked, pack_weights, to_blocked

rng = np.random.default_rng(11)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


CONVS = [  # id, input NCHW shape, out channels, kernel, stride, pad, depthwise, knobs
    ("3x3_pad1", (1, 16, 10, 12), 16, 3, 1, 1, False, {}),
    ("3x3_s2_odd", (1, 8, 15, 17), 24, 3, 2, 1, False, {}),
    ("7x7_s2_stem_3ch", (1, 3, 30, 30), 16, 7, 2, 3, False, {}),
    ("1x1_gemm", (2, 32, 7, 9), 16, 1, 1, 0, False, {}),
    ("1x1_s2", (1, 16, 14, 14), 32, 1, 2, 0, False, {}),
    ("13x13_widened", (1, 16, 13, 13), 16, 3, 1, 1, False, {}),
    ("block6", (1, 12, 9, 9), 20, 3, 1, 1, False, {}),
    ("depthwise", (1, 16, 14, 14), 16, 3, 1, 1, True, {}),
    ("depthwise_s2", (1, 16, 15, 15), 16, 3, 2, 1, True, {}),
    ("depthwise_s2_pad2_odd", (1, 24, 13, 11), 24, 3, 2, 2, True, {}),  # padded input read as whole vectors
    ("depthwise_block6_pad1", (1, 12, 9, 7), 12, 3, 1, 1, True, {}),
    ("depthwise_5x5_pad2", (2, 16, 10, 10), 16, 5, 1, 2, True, {}),
    ("1x1_short_reduction", (1, 16, 11, 13), 24, 1, 1, 0, False, {}),
    ("tuned_tiles", (1, 16, 8, 8), 32, 3, 1, 1, False, {"ow_tile": 2, "oc_tile": 2, "oh_tile": 2}),
]


@pytest.fixture(scope="module")
def conv_runs():
    kernels, expected = [], []
    for cid, shape, m, k, s, p, dw, knobs in CONVS:
        x, w, bias = f32(*shape), f32(m, 1 if dw else shape[1], k, k), f32(m)
        attrs = {"strides": (s, s), "pads": (p,) * 4, "dilations": (1, 1)}
        ob = block_for(m, 8)
        ib = ob if dw else block_for(shape[1], 8)
        schedule = (lambda sch, outs, target, kn=knobs: schedule_conv2d_nchwc(sch, outs, target, **kn)) if knobs else None
        kernels.append(OpKernel(f"nchwc_{cid}", "Conv2dNCHWc",
                                [to_blocked(x, ib), pack_weights(w, ib, ob, dw), bias.reshape(-1, ob)],
                                dict(attrs, depthwise=dw), schedule_fn=schedule))
        kernels.append(OpKernel(f"nchw_{cid}", "Conv", [x, w, bias], dict(attrs, group=shape[1] if dw else 1)))
        expected.append((float(np.sqrt(w[0].size)), ob))
    runs = build_kernels(kernels)
    return {c[0]: (runs[2 * k].run()[0], runs[2 * k + 1].run()[0], *expected[k]) for k, c in enumerate(CONVS)}


@pytest.mark.parametrize("cid", [c[0] for c in CONVS])
def test_conv2d_nchwc_matches_the_nchw_conv(conv_runs, cid):
    blocked, plain, scale, ob = conv_runs[cid]
    assert blocked.shape[-1] == ob and blocked.ndim == 5
    np.testing.assert_allclose(from_blocked(blocked), plain, rtol=1e-4, atol=2e-5 * scale)


def test_layout_transforms_and_blocked_pools_match_their_folds():
    x = f32(1, 16, 9, 11)
    xb = to_blocked(x, 8)
    pool = {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "dilations": (1, 1), "ceil_mode": 0}
    cases = [
        ("LayoutTransform", [x], {"src_block": 0, "dst_block": 8}),
        ("LayoutTransform", [xb], {"src_block": 8, "dst_block": 0}),
        ("LayoutTransform", [xb], {"src_block": 8, "dst_block": 4}),
        ("MaxPoolNCHWc", [xb], pool),
        ("AveragePoolNCHWc", [xb], dict(pool, count_include_pad=0, ceil_mode=1)),
        ("GlobalAveragePoolNCHWc", [xb], {}),
        ("GlobalMaxPoolNCHWc", [xb], {}),
    ]
    runs = build_kernels([OpKernel(f"k{k}", op, ins, attrs) for k, (op, ins, attrs) in enumerate(cases)])
    for (op, ins, attrs), run in zip(cases, runs):
        (want,) = get_op(op).fold(ins, attrs)
        (got,) = run.run()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{op} {attrs}")
