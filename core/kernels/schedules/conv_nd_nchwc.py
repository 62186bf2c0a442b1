"""CPU schedules of NCDHW[x]c: ConvNDNCHWc (3-D convs), Conv2dNCHWc's register tile with one more row axis;
PoolNDNCHWc, the blocked 2-D pools' loop nest.

Dense: (n, oc.o, od, oh.o) fused and parallel, ow.o | ic, kd, kh, kw, ib | oh.i, oc.i, ow.i (unrolled) |
oc block (vectorized): oh_tile x oc_tile x ow_tile vector accumulators stay in registers for the
whole reduction, each step loads oc_tile packed weight vectors and broadcasts one input scalar per
row and column. Depthwise: (n, c, od, oh.o) parallel | ow.o | kd, kh, kw | oh.i, ow.i | c (vectorized).
Pools: (n, c, od, oh) parallel | ow.o | kd, kh, kw | ow.i (unrolled: independent max/add chains) | block.
"""
from __future__ import annotations

from typing import Optional, Sequence

from ...target import Target
from ...te.schedule import Schedule
from ...te.tensor import ComputeOp, Tensor
from .conv2d_nchwc import IC_INSIDE_WINDOW, IC_OUTSIDE_WINDOW, MAX_COLUMNS, default_tiles
from .epilogue import schedule_epilogue
from .generic import extent, output_stage, parallelize, worth_parallel
from .util import find_ops, inputs_tagged, largest_divisor


def schedule_conv_nd_nchwc_stage(sch: Schedule, op: ComputeOp, target: Target, ow_tile: Optional[int] = None,
                                 oc_tile: Optional[int] = None, oh_tile: Optional[int] = None,
                                 reduce_order: int = IC_OUTSIDE_WINDOW, unroll_kw: int = 0) -> None:
    """The knobs (core/tune/templates.py; defaults: conv2d_nchwc's default_tiles): the register tile
    ow_tile x oc_tile x oh_tile; reduce_order: input channels outside (ic, kd, kh, kw, ib) or inside
    the window (kd, kh, kw, ic, ib); unroll_kw: unroll the window-column loop."""
    stage = sch[Tensor(op)]
    n, oc, *rows, oh, ow, ob = op.axis
    d_ow, d_oc, d_oh = default_tiles(op, target)
    owo, owi = stage.split(ow, ow_tile or d_ow)
    oho, ohi = stage.split(oh, oh_tile or d_oh)
    if op.attrs.get("depthwise"):
        window = list(op.reduce_axis)
        stage.reorder(n, oc, *rows, oho, owo, *window, ohi, owi, ob)
        outer = [n, oc, *rows, oho]
    else:
        ric, *window, rib = op.reduce_axis
        oco, oci = stage.split(oc, oc_tile or d_oc)
        reduce = [*window, ric, rib] if reduce_order == IC_INSIDE_WINDOW else [ric, *window, rib]
        stage.reorder(n, oco, *rows, oho, owo, *reduce, ohi, oci, owi, ob)
        stage.unroll(oci)
        outer = [n, oco, *rows, oho]
    if unroll_kw:
        stage.unroll(window[-1])
    stage.unroll(ohi)
    stage.unroll(owi)
    stage.vectorize(ob)
    if worth_parallel(extent(op.axis) * extent(op.reduce_axis), target):
        parallelize(stage, outer, target)


def blocked_pad(sch: Schedule, op: ComputeOp, target: Target) -> None:
    """The padded blocked input: (n, c, d, h) parallel | w | block (vectorized: the border test is per pixel)."""
    pad = sch[Tensor(op)]
    leaves = list(pad.leaf_iter_vars)
    pad.vectorize(leaves[-1])
    if worth_parallel(extent(leaves), target):
        parallelize(pad, leaves[:-2], target)


def schedule_conv_nd_nchwc(sch: Schedule, outs: Sequence[Tensor], target: Target, **knobs: int) -> None:
    """`knobs` (see schedule_conv_nd_nchwc_stage) come from a tuned config (core/tune/templates.py)."""
    for op in find_ops(outs, ["conv_nd_nchwc"]):
        schedule_conv_nd_nchwc_stage(sch, op, target, **knobs)
        for pad_op in inputs_tagged(op, "conv_nd_nchwc_pad"):
            blocked_pad(sch, pad_op, target)
    for op in find_ops(outs, ["conv_nd_nchwc_bias"]):
        if any(t.op is op for t in outs):  # the bias (or crop) added to each register tile as it is finished
            schedule_epilogue(sch, [Tensor(op)], target)
        else:
            output_stage(sch, op, outs, target)


def schedule_pool_nd_nchwc(sch: Schedule, outs: Sequence[Tensor], target: Target) -> None:
    for op in find_ops(outs, ["pool_nd_nchwc"]):
        stage = sch[Tensor(op)]
        n, c, *rows, ow, b = op.axis
        owo, owi = stage.split(ow, largest_divisor(ow.extent, list(range(MAX_COLUMNS, 0, -1))) or 1)
        stage.reorder(n, c, *rows, owo, *op.reduce_axis, owi, b)
        stage.unroll(owi)
        stage.vectorize(b)
        if worth_parallel(extent(op.axis) * extent(op.reduce_axis), target):
            parallelize(stage, [n, c, *rows], target)
        for pad_op in inputs_tagged(op, "pool_nd_nchwc_pad"):
            blocked_pad(sch, pad_op, target)
    for op in find_ops(outs, ["pool_nd_nchwc_out"]):
        output_stage(sch, op, outs, target)
