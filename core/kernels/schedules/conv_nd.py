"""CPU schedules of the N-d window ops (3-D convs and pools), the 2-D ones' loop nests with more rows.

ConvND: n, oc.o, (od, oh.o) | ic, kd, kh, kw | oh.i, oc.i (unrolled), ow.i (vectorized), the register
tile of conv2d.py (its tile heuristics too): accumulators stay in vector registers across the
whole reduction, each weight broadcast feeds ow.i columns, threads take the fused outer tiles.
Grouped and depthwise convs keep oc whole (the input channel depends on it) and tile columns only.
PoolND: every tap of the padded input reduced into a vectorized output row, threads over (n, c, rows).
"""
from __future__ import annotations

from typing import Optional, Sequence

from ...target import Target
from ...te.schedule import Schedule
from ...te.tensor import ComputeOp, Tensor
from .conv2d import channel_tile, column_tile, row_tile
from .generic import extent, output_stage, parallelize, window_pad_stage, worth_parallel
from .util import find_ops, inputs_tagged


def schedule_conv_nd_stage(sch: Schedule, op: ComputeOp, target: Target, ow_tile: Optional[int] = None,
                           oc_tile: Optional[int] = None, oh_tile: Optional[int] = None) -> None:
    """Schedule one conv_nd stage; the optional tiles are knobs (defaults derive from target and shape)."""
    stage = sch[Tensor(op)]
    n, oc, *rows, ow = stage.op.axis
    rc, *window = stage.op.reduce_axis
    lanes = target.lanes(op.dtype)
    owt = ow_tile or column_tile(ow.extent, lanes)
    owo, owi = stage.split(ow, owt)
    vectors = -(-owt // lanes)
    grouped = op.attrs.get("group", 1) > 1
    last = rows[-1] if rows else None
    rows_in_tile = oh_tile or (row_tile(last.extent, vectors) if last is not None and not grouped else 1)
    tile_rows = []
    if rows_in_tile > 1 and last is not None:
        oho, ohi = stage.split(last, rows_in_tile)
        rows, tile_rows = rows[:-1] + [oho], [ohi]
        stage.unroll(ohi)
    if grouped:
        stage.reorder(n, oc, *rows, owo, rc, *window, *tile_rows, owi)
        outer = [n, oc, *rows]
    else:
        oco, oci = stage.split(oc, oc_tile or channel_tile(oc.extent, vectors * rows_in_tile))
        stage.reorder(n, oco, *rows, owo, rc, *window, *tile_rows, oci, owi)
        stage.unroll(oci)
        outer = [n, oco, *rows]
    if window and window[-1].extent <= 3:
        stage.unroll(window[-1])
    stage.vectorize(owi)
    if worth_parallel(extent(op.axis) * extent(op.reduce_axis), target):
        parallelize(stage, outer, target)


def schedule_conv_nd(sch: Schedule, outs: Sequence[Tensor], target: Target, **knobs: int) -> None:
    """`knobs` (ow_tile, oc_tile, oh_tile) come from a tuned config (core/tune/templates.py)."""
    for op in find_ops(outs, ["conv_nd"]):
        schedule_conv_nd_stage(sch, op, target, **knobs)
        for pad in inputs_tagged(op, "conv_nd_pad"):
            window_pad_stage(sch[Tensor(pad)], target)
    for op in find_ops(outs, ["conv_nd_bias"]):
        output_stage(sch, op, outs, target)


def schedule_pool_nd(sch: Schedule, outs: Sequence[Tensor], target: Target) -> None:
    """Each reduction computes the padded input rows of its current output row at that row (into a buffer that
    stays in L1, not a pass over memory); an average's (Lp root's) output stage computes the sums of each of its
    rows at that row. Measured on AveragePool3d (32x16x56x56, 3x3x3 stride 2, 2 threads, 15 interleaved rounds):
    2.0x ORT's time with the padded input and the sums each a full pass, 0.6-0.7x with both at the rows."""
    attached = set()
    for op in find_ops(outs, ["pool_nd"]):
        if op.reduce_axis or not any(t.op is op for t in outs):
            continue
        stage = sch[Tensor(op)]
        n, c, *rows, ow = op.axis
        stage.vectorize(ow)
        if worth_parallel(extent(op.axis), target):
            parallelize(stage, [n, c, *rows], target)
        for total in op.input_tensors:
            if isinstance(total.op, ComputeOp) and total.op.reduce_axis:
                sch[total].compute_at(stage, stage.leaf_iter_vars[-2])
                attached.add(total.op)
    for op in find_ops(outs, ["pool_nd"]):
        if not op.reduce_axis:
            if not any(t.op is op for t in outs):
                output_stage(sch, op, outs, target)
            continue
        stage = sch[Tensor(op)]
        n, c, *rows, ow = op.axis
        stage.reorder(n, c, *rows, *op.reduce_axis, ow)
        stage.vectorize(ow)
        if op not in attached and worth_parallel(extent(op.axis) * extent(op.reduce_axis), target):
            parallelize(stage, [n, c, *rows], target)
        row = stage.leaf_iter_vars[stage.leaf_iter_vars.index(op.reduce_axis[0]) - 1]
        for pad in inputs_tagged(op, "pool_nd_pad"):
            sch[Tensor(pad)].compute_at(stage, row)
