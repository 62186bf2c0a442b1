"""CPU schedule of Conv2dWinogradNCHWc (core/kernels/conv2d_winograd.py), stage by stage:

input transform: (n, ic, tile row) parallel | tile column | (m+2)^2 positions (unrolled) | lanes
  (vector);
GEMM: (n, position, oc.o, tile.o) parallel | ic, ib | tile.i, oc.i (unrolled) | oc block (vector),
  the register tile of a 1x1 Conv2dNCHWc over tiles x channels;
output transform (with the fused epilogue inlined into it): (n, oc, tile row) parallel | tile
  column | m x m pixels (unrolled) | oc block (vector).
"""
from __future__ import annotations

from typing import Optional, Sequence

from ...target import Target
from ...te.schedule import Schedule, Stage, reads_at_own_axes
from ...te.tensor import ComputeOp, Tensor
from .conv2d_nchwc import MAX_ACCUMULATORS, MAX_COLUMNS, blocked_pad_stage
from .generic import extent, parallelize, worth_parallel
from .util import find_ops, inputs_tagged, largest_divisor


def default_gemm_tiles(op: ComputeOp) -> tuple[int, int]:
    """(tile_t, oc_t): the most accumulators within budget over exact splits; ties go to more
    channel blocks (fewer broadcasts per FMA)."""
    _, _, ocb, tiles, _ = (a.extent for a in op.axis)
    best = (0, 0, 0)
    for oc_t in (4, 3, 2, 1):
        if ocb % oc_t == 0:
            tile_t = largest_divisor(tiles, list(range(min(MAX_COLUMNS, MAX_ACCUMULATORS // oc_t), 0, -1))) or 1
            best = max(best, (tile_t * oc_t, oc_t, tile_t))
    return best[2], best[1]


def _parallel(stage: Stage, outer: list, target: Target, work: int) -> None:
    if worth_parallel(work, target):
        parallelize(stage, outer, target)


def schedule_input_transform(sch: Schedule, op: ComputeOp, target: Target) -> None:
    stage = sch[Tensor(op)]
    n, k, c, p, lane = op.axis
    columns = op.attrs["tile_columns"]
    rows, cols = stage.split(p, columns) if p.extent % columns == 0 else (p, None)
    stage.reorder(n, c, *([rows, cols] if cols is not None else [p]), k, lane)
    stage.unroll(k)
    stage.vectorize(lane)
    _parallel(stage, [n, c, rows], target, extent(op.axis) * 4)


def schedule_gemm(sch: Schedule, op: ComputeOp, target: Target, tile_t: Optional[int] = None,
                  oc_t: Optional[int] = None, unroll_inner: int = 0) -> None:
    """The knobs (core/tune/templates.py; defaults = the heuristic): tile_t x oc_t, the register
    tile (default_gemm_tiles); unroll_inner: unroll the input-channel lanes (ib) at lowering."""
    stage = sch[Tensor(op)]
    n, k, o, p, c = op.axis
    ric, rib = op.reduce_axis
    d_tile, d_oc = default_gemm_tiles(op)
    po, pi = stage.split(p, tile_t or d_tile)
    oo, oi = stage.split(o, oc_t or d_oc)
    stage.reorder(n, k, oo, po, ric, rib, pi, oi, c)
    stage.unroll(pi)
    stage.unroll(oi)
    if unroll_inner:
        stage.unroll(rib)
    stage.vectorize(c)
    _parallel(stage, [n, k, oo, po], target, extent(op.axis) * extent(op.reduce_axis))


def schedule_output_transform(stage: Stage, tile: int, target: Target) -> None:
    """`stage`: the output transform, or the epilogue stage it is inlined into (same axes)."""
    n, o, y, x, c = stage.op.axis
    if y.extent % tile or x.extent % tile:  # ragged sizes: each pixel picks its transform row at run time
        stage.vectorize(c)
        _parallel(stage, [n, o, y], target, extent(stage.op.axis) * 9)
        return
    yo, yi = stage.split(y, tile)
    xo, xi = stage.split(x, tile)
    stage.reorder(n, o, yo, xo, yi, xi, c)
    stage.unroll(yi)
    stage.unroll(xi)
    stage.vectorize(c)
    _parallel(stage, [n, o, yo], target, extent(stage.op.axis) * 9)


def _epilogue_reading(sch: Schedule, outs: Sequence[Tensor], op: ComputeOp) -> Optional[Stage]:
    """The single kernel output computed elementwise from the output transform `op`, if any."""
    if len(outs) != 1 or outs[0].op is op or tuple(outs[0].shape) != tuple(Tensor(op).shape):
        return None
    return sch[outs[0]] if reads_at_own_axes(sch, outs[0].op, op) else None


def schedule_conv2d_winograd(sch: Schedule, outs: Sequence[Tensor], target: Target, **knobs: int) -> None:
    """`knobs` (see schedule_gemm) come from a tuned config (core/tune/templates.py)."""
    for op in find_ops(outs, ["winograd_gemm"]):
        schedule_gemm(sch, op, target, **knobs)
    for op in find_ops(outs, ["winograd_input"]):
        schedule_input_transform(sch, op, target)
        for pad in inputs_tagged(op, "winograd_pad"):
            blocked_pad_stage(sch[Tensor(pad)], target)
    for op in find_ops(outs, ["winograd_output"]):
        epilogue = _epilogue_reading(sch, outs, op)
        if epilogue is not None:  # a fused ReLU/residual Add runs on the transform's outputs in registers
            sch[Tensor(op)].compute_inline()
            schedule_output_transform(epilogue, op.attrs["tile"], target)
        else:
            schedule_output_transform(sch[Tensor(op)], op.attrs["tile"], target)
