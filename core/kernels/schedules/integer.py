"""CPU schedules of the 8-bit ops: MatMulInteger and ConvInteger (shifted operands inlined into the float op's schedule;
depthwise convs per channel plane), the tensorized packed kernels, and the channels-last depthwise conv."""
from __future__ import annotations

from typing import Optional, Sequence

from ...target import Target
from ...te.schedule import Schedule
from ...te.tensor import Tensor
from ..integer_depthwise import PAD_TAG, ROWS_TAG
from ..registry import register_schedule
from ...te.intrinsics import get_intrinsic
from ...te.tensor import ComputeOp
from .conv2d import column_tile, schedule_conv2d
from .epilogue import schedule_epilogue
from .generic import extent, injective_stage, output_stage, parallelize, worth_parallel
from .matmul import schedule_matmul
from .util import find_ops, inputs_tagged, largest_divisor

ACCUMULATOR_REGISTERS = 24  # of AVX-512's 32 (AVX2 and NEON: 12 of 16); the rest hold loads and broadcasts


def inline_shifts(sch: Schedule, outs: Sequence[Tensor]) -> None:
    from ..integer import SHIFT_TAG

    for op in find_ops(outs, [SHIFT_TAG]):
        sch[Tensor(op)].compute_inline()


@register_schedule("MatMulInteger")
def schedule_matmul_integer(sch: Schedule, outs: Sequence[Tensor], target: Target, **knobs: int) -> None:
    inline_shifts(sch, outs)
    schedule_matmul(sch, outs, target, **knobs)


@register_schedule("ConvInteger")
def schedule_conv_integer(sch: Schedule, outs: Sequence[Tensor], target: Target, **knobs: int) -> None:
    inline_shifts(sch, outs)
    depthwise = [op for op in find_ops(outs, ["conv2d"]) if inputs_tagged(op, PAD_TAG)]
    if not depthwise:
        schedule_conv2d(sch, outs, target, **knobs)
        return
    for op in depthwise:
        schedule_depthwise_integer(sch, op, target, **knobs)
    for op in find_ops(outs, ["conv2d_bias"]):
        output_stage(sch, op, outs, target)


def schedule_depthwise_integer(sch: Schedule, op: ComputeOp, target: Target, ow_tile: Optional[int] = None) -> None:
    """(n, c) fused and parallel | the channel's int16 padded plane (integer_depthwise.py: a few KB, in L1
    while the taps read it) | oh, ow.o | taps (kw unrolled) | ow.i (vectorized int32 lanes)."""
    stage = sch[Tensor(op)]
    n, oc, oh, ow = op.axis
    rc, rkh, rkw = op.reduce_axis
    owo, owi = stage.split(ow, ow_tile or column_tile(ow.extent, target.lanes(op.dtype)))
    stage.reorder(n, oc, oh, owo, rc, rkh, rkw, owi)
    stage.unroll(rkw)
    stage.vectorize(owi)
    channel = stage.fuse(n, oc)
    if worth_parallel(extent(op.axis) * extent(op.reduce_axis), target):
        stage.parallel(channel)
    for pad_op in inputs_tagged(op, PAD_TAG):
        sch[Tensor(pad_op)].compute_at(stage, channel)


# What a weight vector load costs next to a data broadcast: each column block of a tile streams its own packed
# panel (L2, far apart), the data rows sit in L1. Scored so, resnet18's 14x14 convs took 7x2 tiles instead of 2x8:
# 0.55 -> 0.28 ms at one thread (28x28: 4x4 -> 7x2, 0.30 -> 0.29 ms).
WEIGHT_LOAD_COST = 4


def register_tile(rows: int, blocks: int, budget: int, row_tile: Optional[int] = None,
                  col_blocks: Optional[int] = None) -> tuple[int, int]:
    """(rows, column blocks) per register tile, among tiles within `budget` accumulators that divide both extents
    (no guard may reach the tensorized nest): the most calls per load, a weight load counting WEIGHT_LOAD_COST
    broadcasts, then more accumulators. A tuned knob stays as given."""
    row_options = [row_tile] if row_tile else [r for r in range(min(rows, 8), 0, -1) if rows % r == 0]
    col_options = [col_blocks] if col_blocks else [c for c in range(min(blocks, 8), 0, -1) if blocks % c == 0]
    pairs = [(r, c) for r in row_options for c in col_options if r * c <= budget]
    pairs = pairs or [(row_options[-1], col_options[-1])]
    return max(pairs, key=lambda rc: (rc[0] * rc[1] / (rc[0] + WEIGHT_LOAD_COST * rc[1]), rc[0] * rc[1]))


def accumulator_budget(target: Target) -> int:
    return ACCUMULATOR_REGISTERS if target.vector_bits >= 512 else ACCUMULATOR_REGISTERS // 2


def weights_outweigh_data(op: ComputeOp) -> bool:
    """Whether a conv's `int8_dot` reads more weight bytes (taps x channels x O) than data bytes (about its output
    pixels x channels): then its column blocks go outermost (`weights_outer`)."""
    *taps, _ = op.reduce_axis
    depth = extent(op.reduce_axis)
    return depth * op.axis[-1].extent > extent(op.axis[:-1]) * depth // extent(taps[:-1])


def schedule_int8_dot(sch: Schedule, op: ComputeOp, target: Target, rows: Optional[int] = None,
                      col_blocks: Optional[int] = None, weights_outer: Optional[int] = None) -> None:
    """Register tile `rows` x `col_blocks` intrinsic calls around the whole reduction: loop order
    outer rows, i.o, j.o.o | reduction (a conv's taps, then channel groups) | i.i, j.o.i (unrolled) |
    j.i, ki (one tensorized call). Each call's four data bytes are one broadcast, its lanes x 4 weights
    one load; the accumulators stay in registers. `weights_outer` (default: a conv whose weights outweigh
    its data) puts j.o.o first: each tile's weight panels then stay in L2 across all output rows instead of
    streaming from L3 once per row (resnet18's 7x7 convs: 2.4 MB of weights each, read 7 times; in the model
    0.33 -> 0.29 ms at one thread)."""
    intrinsic = get_intrinsic(op.attrs["intrinsic"])
    stage = sch[Tensor(op)]
    *batch, i, j = op.axis
    *taps, ki = op.reduce_axis
    rt, cb = register_tile(i.extent, j.extent // intrinsic.lanes, accumulator_budget(target), rows, col_blocks)
    if weights_outer is None:
        weights_outer = op.attrs.get("conv_columns") is not None and weights_outweigh_data(op)
    jo, ji = stage.split(j, intrinsic.lanes)
    joo, joi = stage.split(jo, cb)
    io, ii = stage.split(i, rt)
    outer = [joo, *batch, io] if weights_outer else [*batch, io, joo]
    stage.reorder(*outer, *taps, ii, joi, ji, ki)
    stage.unroll(ii)
    stage.unroll(joi)
    stage.tensorize(ji, intrinsic)
    if worth_parallel(extent(op.axis) * extent(op.reduce_axis), target):
        parallelize(stage, outer, target)


def accumulate_in_output_tiles(sch: Schedule, op: ComputeOp, outs: Sequence[Tensor], target: Target,
                               rows: Optional[int] = None, col_blocks: Optional[int] = None,
                               weights_outer: Optional[int] = None) -> bool:
    """A channels-last conv's `int8_dot` computed per register tile of the kernel's one output (compute_at: a
    local rows x col_blocks accumulator tile, the epilogue right after it), when tiles divide the output
    exactly. Otherwise (schedule_int8_dot) the dot is a whole-output int32 workspace that each tile writes and
    the epilogue reads back: 4.8 MB through the caches for mobilenet_v2's 16 -> 96 expand conv at 112x112, whose
    16-deep dot is cheaper than that traffic. False when it does not apply."""
    if op.attrs.get("conv_output") != "channels_last":
        return False
    intrinsic = get_intrinsic(op.attrs["intrinsic"])
    n, oh, ow_c, padded = op.shape
    if len(outs) != 1 or op.attrs["conv_width"] != ow_c \
            or op.attrs["conv_columns"] != padded or tuple(outs[0].shape) != (n, 1, oh, ow_c, padded):
        return False
    rt, cb = register_tile(ow_c, padded // intrinsic.lanes, accumulator_budget(target), rows, col_blocks)
    *taps, ki = op.reduce_axis
    if weights_outer is None:
        weights_outer = weights_outweigh_data(op)
    stage = sch[outs[0]]
    b, unit, y, x, o = stage.op.axis
    xo, xi = stage.split(x, rt)
    oo, oi = stage.split(o, cb * intrinsic.lanes)
    outer = [oo, b, unit, y, xo] if weights_outer else [b, unit, y, xo, oo]
    stage.reorder(*outer, xi, oi)
    stage.unroll(xi)
    stage.vectorize(oi)
    if worth_parallel(extent(op.axis) * extent(op.reduce_axis), target):
        parallelize(stage, outer, target)
    dot = sch[Tensor(op)]
    dot.compute_at(stage, stage.leaf_iter_vars[stage.leaf_iter_vars.index(xi) - 1])  # outer[-1], or the fused loop
    db, dy, dx, do = op.axis
    jo, ji = dot.split(do, intrinsic.lanes)
    dot.reorder(db, dy, *taps, dx, jo, ji, ki)
    dot.unroll(dx)
    dot.unroll(jo)
    dot.tensorize(ji, intrinsic)
    return True


@register_schedule("MatMulIntegerPacked")
@register_schedule("ConvIntegerPacked")
@register_schedule("ConvIntegerPackedNCHWc")
def schedule_packed_integer(sch: Schedule, outs: Sequence[Tensor], target: Target, **knobs: int) -> None:
    """`knobs` (rows, col_blocks) come from a tuned config (core/tune/templates_int8.py); weights_outer, when not
    given, follows weights_outweigh_data."""
    for op in find_ops(outs, ["int8_data"]):
        injective_stage(sch[Tensor(op)], target)
    tiled = False
    for op in find_ops(outs, ["int8_dot"]):
        tiled = accumulate_in_output_tiles(sch, op, outs, target, **knobs)
        if not tiled:
            schedule_int8_dot(sch, op, target, **knobs)
    for op in find_ops(outs, ["int8_dot_out", "int8_conv_out"]):
        if tiled and any(t.op is op for t in outs):
            continue  # the output tiles are scheduled already
        if any(t.op is op for t in outs):  # unfused: add the correction to each tile while it is in registers
            schedule_epilogue(sch, [Tensor(op)], target)
        else:
            output_stage(sch, op, outs, target)


MAX_DEPTHWISE_COLUMNS = 8  # output columns per register tile of a channels-last depthwise conv
MAX_DEPTHWISE_ROWS = 8  # output rows per padded block of input rows


@register_schedule("DepthwiseConvIntegerNCHWc")
def schedule_depthwise_blocked(sch: Schedule, outs: Sequence[Tensor], target: Target, ow_tile: Optional[int] = None,
                               oh_tile: Optional[int] = None) -> None:
    """(n, oh.o) fused and parallel | channel vectors | the int16 input rows of these oh_tile output rows and
    channels (a few KB: they stay in L1; each input row is converted (oh_tile - 1) * stride + kh times per
    oh_tile output rows, not kh times per row) | oh.i, ow.o | taps | ow.i (unrolled), channel lanes
    (vectorized): each tap is one weight vector load and ow_tile data vector loads for ow_tile multiply-adds."""
    for op in find_ops(outs, ["int8_dw"]):
        stage = sch[Tensor(op)]
        n, unit, oh, ow, c = op.axis
        rkh, rkw = op.reduce_axis
        lanes = largest_divisor(c.extent, [target.lanes("int32") // k for k in (1, 2, 4)]) or 1
        co, ci = stage.split(c, lanes)
        owo, owi = stage.split(ow, ow_tile or largest_divisor(ow.extent, list(range(MAX_DEPTHWISE_COLUMNS, 0, -1))))
        oho, ohi = stage.split(oh, oh_tile or largest_divisor(oh.extent, list(range(MAX_DEPTHWISE_ROWS, 0, -1))))
        stage.reorder(n, unit, oho, co, ohi, owo, rkh, rkw, owi, ci)
        stage.unroll(rkw)
        stage.unroll(owi)
        stage.vectorize(ci)
        rows = stage.fuse(n, unit, oho)
        if worth_parallel(extent(op.axis) * extent(op.reduce_axis), target):
            stage.parallel(rows)
        for pad_op in inputs_tagged(op, ROWS_TAG):
            pad = sch[Tensor(pad_op)]
            pad.compute_at(stage, co)
            pad.vectorize(pad.leaf_iter_vars[-1])
