"""Blocked-layout kernels: Conv2dNCHWc against Kiln's NCHW Conv kernel (dense, 1x1, strided, widened
odd widths, depthwise, tuned tiles) and grouped against the Conv fold, LayoutTransform and the blocked
pools against their folds."""
from __future__ import annotations

import numpy as np
import pytest

from core.graph.ops import get_op
from core.kernels.schedules.conv2d_nchwc import schedule_conv2d_nchwc
from tests.helpers.kernel_runs import OpKernel, build_kernels
from core.packing.blocked import block_for, expand_groups, from_blocked, grouped_blocking, pack_weights, to_blocked

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
    ("1x1_width7_widened", (1, 32, 7, 7), 64, 1, 1, 0, False, {}),  # computed 8 wide, cropped to 7
    ("3x3_width7_widened", (1, 16, 7, 7), 32, 3, 1, 1, False, {}),
    ("depthwise_width7", (1, 16, 7, 7), 16, 3, 1, 1, True, {}),
    ("1x1_width7_odd_blocks", (1, 16, 7, 7), 40, 1, 1, 0, False, {}),  # 5 output blocks: not widened
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


GROUPED = [  # id, input NCHW shape, out channels, kernel, stride, pad, group, lanes, (block, blocked groups), knobs
    ("groups_of_one_block", (1, 32, 9, 10), 32, 3, 1, 1, 4, 8, (8, 4), {}),  # regnet: 8-channel groups
    ("groups_of_two_blocks_s2", (1, 32, 11, 11), 64, 3, 2, 1, 2, 8, (8, 2), {}),
    ("wide_block_diagonal", (1, 16, 7, 8), 16, 3, 1, 1, 2, 16, (16, 1), {}),  # AVX-512: two 8-channel groups
    ("half_vector_blocks", (1, 24, 7, 8), 24, 3, 1, 1, 3, 16, (8, 3), {}),  # 24 channels take 12-blocks
    ("block_diagonal", (1, 32, 8, 9), 32, 3, 1, 1, 8, 8, (8, 4), {}),  # resnext: 4-channel groups, 2 per block
    ("block_diagonal_1x1", (2, 16, 5, 6), 16, 1, 1, 0, 8, 8, (8, 2), {}),
    ("tile_across_groups", (1, 64, 8, 8), 64, 3, 1, 1, 4, 8, (8, 4),  # each unrolled oc block reads its own group
     {"ow_tile": 4, "oc_tile": 4, "oh_tile": 2, "ic_tile": 2, "reduce_order": 1}),
]


def test_dense_convs_compute_width_7_as_8_columns_where_a_tile_takes_several_blocks():
    """A 7-column tile holds one channel block (a broadcast per FMA); 8 columns take a 4 x 2 tile."""
    from core.kernels.conv2d_nchwc import conv2d_nchwc
    from core.kernels.schedules.conv2d_nchwc import default_tiles
    from core.target import get_target
    from core.te import tensor as te

    x = te.placeholder((1, 4, 7, 7, 8), "float32", "x")
    dense = conv2d_nchwc(x, te.placeholder((8, 4, 1, 1, 8, 8), "float32", "w"), (1, 1), (0,) * 4, (1, 1), False)
    depthwise = conv2d_nchwc(x, te.placeholder((4, 1, 3, 3, 1, 8), "float32", "w"), (1, 1), (1,) * 4, (1, 1), True)
    assert (dense.shape[3], dense.op.attrs["width"]) == (8, 7)
    assert default_tiles(dense.op, get_target("x86-64-v3"))[:2] == (2, 4)
    assert (depthwise.shape[3], depthwise.op.attrs["width"]) == (7, 7)
    five_blocks = te.placeholder((5, 4, 1, 1, 8, 8), "float32", "w")
    one_block_tiles = conv2d_nchwc(x, five_blocks, (1, 1), (0,) * 4, (1, 1), False)
    assert one_block_tiles.shape[3] == 7  # 5 output blocks: each tile holds one, 8 columns would only add work


@pytest.mark.parametrize("case", GROUPED, ids=[c[0] for c in GROUPED])
def test_grouped_conv2d_nchwc_matches_the_conv_fold(case):
    cid, shape, m, k, s, p, group, lanes, blocking, knobs = case
    x, w, bias = f32(*shape), f32(m, shape[1] // group, k, k), f32(m)
    attrs = {"strides": (s, s), "pads": (p,) * 4, "dilations": (1, 1)}
    assert grouped_blocking(shape[1], m, group, lanes, lanes // 2) == blocking
    block, blocked_groups = blocking
    packed = pack_weights(expand_groups(w, group, blocked_groups), block, block, False)
    inputs = [to_blocked(x, block), packed, bias.reshape(-1, block)]
    schedule = (lambda sch, outs, target: schedule_conv2d_nchwc(sch, outs, target, **knobs)) if knobs else None
    (run,) = build_kernels([OpKernel(f"grouped_{cid}", "Conv2dNCHWc", inputs,
                                     dict(attrs, depthwise=False, group=blocked_groups), schedule_fn=schedule)])
    (want,) = get_op("Conv").fold([x, w, bias], dict(attrs, group=group))
    (folded,) = get_op("Conv2dNCHWc").fold(inputs, dict(attrs, depthwise=False, group=blocked_groups))
    np.testing.assert_allclose(from_blocked(run.run()[0]), want, rtol=1e-4, atol=2e-5 * np.sqrt(w[0].size))
    np.testing.assert_allclose(from_blocked(folded), want, rtol=1e-5, atol=1e-5)


def test_groups_that_do_not_fit_blocks_have_no_blocking():
    assert grouped_blocking(32, 64, 16, 8, 4) is None  # 2 in, 4 out per group: no block of whole groups
    assert grouped_blocking(32, 32, 16, 16, 8) is None  # 2-channel groups: 8 multiplies per useful one
    assert grouped_blocking(40, 40, 10, 16, 8) is None  # 4-channel groups, blocks of 10 split them


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


def test_a_blocked_elementwise_op_runs_threads_over_rows_and_each_rows_vectors_serially():
    from core.target import get_target
    from core.tir.stmt import For, ForKind

    x = to_blocked(f32(1, 64, 28, 28), 8)
    func = OpKernel("relu_blocked", "Relu", [x], {}).lower(get_target("x86-64-v3"))
    kinds = []

    def walk(s):
        if isinstance(s, For):
            kinds.append((s.kind, s.extent.value))
        for child in ("body", "then_case", "else_case"):
            if getattr(s, child, None) is not None:
                walk(getattr(s, child))
        for inner in getattr(s, "stmts", ()):
            walk(inner)

    walk(func.body)
    # (n, channel block, row) fused across threads; the row's 28 vectors a plain loop, not fused in:
    # per vector, a fused loop's index math cost 4x the copy (generic.injective_stage)
    assert kinds[0] == (ForKind.PARALLEL, 8 * 28) and kinds[1] == (ForKind.SERIAL, 28)
    np.testing.assert_array_equal(build_kernels([OpKernel("relu_blocked", "Relu", [x], {})])[0].run()[0],
                                  np.maximum(x, 0))
