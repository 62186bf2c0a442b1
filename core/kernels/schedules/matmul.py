"""CPU schedule of MatMul: register tile of rows (unrolled) x columns (vector lanes) around k.

Loop order batch, i.o, j.o | k | i.i (unrolled), j.i (vectorized): B's row segment for one k is
one vector load, each A element one broadcast, and the i.i x j.i accumulators stay in registers for
the whole k loop. Threads split the fused (batch, i.o, j.o) tiles.
"""
from __future__ import annotations

from typing import Optional, Sequence

from ...target import Target
from ...te.schedule import Schedule
from ...te.tensor import ComputeOp, Tensor
from .conv2d import MAX_ACCUMULATORS, column_tile
from .generic import extent, injective_stage, parallelize, worth_parallel
from .util import find_ops, largest_divisor


def row_tile(m: int, vectors: int) -> int:
    budget = max(1, MAX_ACCUMULATORS // vectors)
    return largest_divisor(m, [c for c in (6, 4, 8, 3, 5, 2, 1) if c <= budget]) or 1


def schedule_matmul_stage(sch: Schedule, op: ComputeOp, target: Target, row: Optional[int] = None,
                          col: Optional[int] = None, k_tile: Optional[int] = None) -> None:
    stage = sch[Tensor(op)]
    *batch, i, j = op.axis
    (k,) = op.reduce_axis
    lanes = target.lanes(op.dtype)
    jt = col or column_tile(j.extent, lanes)
    it = row or row_tile(i.extent, -(-jt // lanes))
    io, ii = stage.split(i, it)
    jo, ji = stage.split(j, jt)
    if k_tile and k_tile < k.extent:
        ko, ki = stage.split(k, k_tile)
        stage.reorder(*batch, jo, ko, io, ki, ii, ji)
        outer = [*batch, jo]
    else:
        stage.reorder(*batch, io, jo, k, ii, ji)
        outer = [*batch, io, jo]
    stage.unroll(ii)
    stage.vectorize(ji)
    if worth_parallel(extent(op.axis) * k.extent, target):
        parallelize(stage, outer, target)


def schedule_matmul(sch: Schedule, outs: Sequence[Tensor], target: Target) -> None:
    for op in find_ops(outs, ["matmul"]):
        schedule_matmul_stage(sch, op, target)
    for op in find_ops(outs, ["injective"]):  # the squeeze of 1-D operands
        injective_stage(sch[Tensor(op)], target)
