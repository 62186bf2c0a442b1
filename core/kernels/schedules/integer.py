"""CPU schedules of the 8-bit ops: MatMulInteger and ConvInteger (shifted operands inlined into the float op's schedule;
depthwise convs per channel plane), the tensorized packed kernels, and the channels-last depthwise conv."""
from __future__ import annotations

from typing import Optional, Sequence

from ...target import Target
from ...te.schedule import Schedule
from ...te.tensor import Tensor
from ..integer_depthwise import PAD_TAG, ROWS_TAG
from ..registry import register_schedule
from ...te.tensorize import get_intrinsic
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


def register_tile(rows: int, blocks: int, budget: int, row_tile: Optional[int] = None,
                  col_blocks: Optional[int] = None) -> tuple[int, int]:
    """(rows, column blocks) per register tile: the most accumulators within `budget` among tiles that
    divide both extents (no guard may reach the tensorized nest), more rows first (each weight load then
    feeds more calls). A tuned knob stays as given."""
    row_options = [row_tile] if row_tile else [r for r in range(min(rows, 8), 0, -1) if rows % r == 0]
    col_options = [col_blocks] if col_blocks else [c for c in range(min(blocks, 8), 0, -1) if blocks % c == 0]
    pairs = [(r, c) for r in row_options for c in col_options if r * c <= budget]
    pairs = pairs or [(row_options[-1], col_options[-1])]
    return max(pairs, key=lambda rc: (rc[0] * rc[1], rc[0]))


def schedule_int8_dot(sch: Schedule, op: ComputeOp, target: Target, rows: Optional[int] = None,
                      col_blocks: Optional[int] = None) -> None:
    """Register tile `rows` x `col_blocks` intrinsic calls around the whole reduction: loop order
    outer rows, i.o, j.o.o | reduction (a conv's taps, then channel groups) | i.i, j.o.i (unrolled) |
    j.i, ki (one tensorized call). Each call's four data bytes are one broadcast, its lanes x 4 weights
    one load; the accumulators stay in registers."""
    intrinsic = get_intrinsic(op.attrs["intrinsic"])
    stage = sch[Tensor(op)]
    *batch, i, j = op.axis
    *taps, ki = op.reduce_axis
    budget = ACCUMULATOR_REGISTERS if target.vector_bits >= 512 else ACCUMULATOR_REGISTERS // 2
    rt, cb = register_tile(i.extent, j.extent // intrinsic.lanes, budget, rows, col_blocks)
    jo, ji = stage.split(j, intrinsic.lanes)
    joo, joi = stage.split(jo, cb)
    io, ii = stage.split(i, rt)
    stage.reorder(*batch, io, joo, *taps, ii, joi, ji, ki)
    stage.unroll(ii)
    stage.unroll(joi)
    stage.tensorize(ji, intrinsic)
    if worth_parallel(extent(op.axis) * extent(op.reduce_axis), target):
        parallelize(stage, [*batch, io, joo], target)


@register_schedule("MatMulIntegerPacked")
@register_schedule("ConvIntegerPacked")
@register_schedule("ConvIntegerPackedNCHWc")
def schedule_packed_integer(sch: Schedule, outs: Sequence[Tensor], target: Target, **knobs: int) -> None:
    """`knobs` (rows, col_blocks) come from a tuned config (core/tune/templates.py)."""
    for op in find_ops(outs, ["int8_data"]):
        injective_stage(sch[Tensor(op)], target)
    for op in find_ops(outs, ["int8_dot"]):
        schedule_int8_dot(sch, op, target, **knobs)
    for op in find_ops(outs, ["int8_dot_out", "int8_conv_out"]):
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
