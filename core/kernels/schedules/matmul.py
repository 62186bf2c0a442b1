"""CPU schedule of MatMul: register tile of rows (unrolled) x columns (vector lanes) around k.

Loop order batch, j.o, k.o, i.o | k.i | i.i (unrolled), j.i (vectorized): B's row segment for one
k is one vector load, each A element one broadcast, and the i.i x j.i accumulators stay in
registers for the whole k.i loop; a K_TILE x j.i panel of B stays in L1 while all row tiles use it.
Threads split the fused (batch, j.o) panels (or (batch, i.o, j.o) tiles when K is short).
Products over packed B (core/kernels/matmul_packed.py) get the cache-blocked micro-kernel of
matmul_blocked.py instead.
"""
from __future__ import annotations

from typing import Optional, Sequence

from ...target import Target
from ...te.schedule import Schedule
from ...te.tensor import ComputeOp, Tensor
from .conv2d import MAX_ACCUMULATORS, column_tile
from .generic import extent, injective_stage, output_stage, parallelize, worth_parallel
from .matmul_blocked import schedule_blocked
from .util import find_ops, largest_divisor


K_TILE = 128  # rows of B per pass: a 128 x 2-vector panel (16 KB) stays in L1 while the row tiles sweep it


def row_tile(m: int, vectors: int) -> int:
    """Rows per register tile. A guarded remainder row keeps its accumulator in memory (LLVM does not
    unswitch the guard), so a divisor of m is preferred; 6 x 2 vectors is the best shape on AVX2."""
    budget = max(1, MAX_ACCUMULATORS // vectors)
    if m <= budget:
        return m
    return largest_divisor(m, [c for c in (6, 4, 5, 8, 3) if c <= budget]) or min(6, budget)


def gemv_columns(n: int, lanes: int) -> int:
    """One row (a vector-matrix product): as many vector registers of columns as divide n, so each
    row of B is read in whole cache lines."""
    return largest_divisor(n, [lanes * v for v in range(MAX_ACCUMULATORS // 2, 0, -1)]) or column_tile(n, lanes)


def schedule_matmul_stage(sch: Schedule, op: ComputeOp, target: Target, row: Optional[int] = None,
                          col: Optional[int] = None, k_tile: Optional[int] = None,
                          k_unroll: Optional[int] = None) -> None:
    """`k_unroll` > 1 (a tuning knob; off by default, no gain measured) asks LLVM to unroll the
    innermost reduce loop that many times (an unroll pragma, llvm.loop.unroll.count)."""
    stage = sch[Tensor(op)]
    *batch, i, j = op.axis
    (k,) = op.reduce_axis
    lanes = target.lanes(op.dtype)
    jt = col or (gemv_columns(j.extent, lanes) if i.extent == 1 else column_tile(j.extent, lanes))
    it = row or row_tile(i.extent, -(-jt // lanes))
    io, ii = stage.split(i, it)
    jo, ji = stage.split(j, jt)
    k_tile = k_tile or (K_TILE if k.extent >= 2 * K_TILE else None)
    if k_tile and k_tile < k.extent:
        ko, ki = stage.split(k, k_tile)
        stage.reorder(*batch, jo, ko, io, ki, ii, ji)
        outer = [*batch, jo]
    else:
        ki = k
        stage.reorder(*batch, io, jo, k, ii, ji)
        outer = [*batch, io, jo]
    if k_unroll and k_unroll > 1:
        stage.pragma(ki, "unroll", k_unroll)
    stage.unroll(ii)
    stage.vectorize(ji)
    if worth_parallel(extent(op.axis) * k.extent, target):
        parallelize(stage, outer, target)


def schedule_matmul(sch: Schedule, outs: Sequence[Tensor], target: Target, **knobs: int) -> None:
    """`knobs` (row, col, k_tile; row_block for packed B) come from a tuned config (core/tune/templates.py)."""
    for op in find_ops(outs, ["matmul_pack"]):  # B packed at run time: a parallel copy before the product
        injective_stage(sch[Tensor(op)], target)
    for op in find_ops(outs, ["matmul"]):
        if op.attrs.get("packed"):
            schedule_blocked(sch, op, outs, target, **{k: v for k, v in knobs.items() if k != "k_unroll"})
        else:
            schedule_matmul_stage(sch, op, target, **{k: v for k, v in knobs.items() if k != "row_block"})
    for op in find_ops(outs, ["injective"]):  # the squeeze of 1-D operands
        output_stage(sch, op, outs, target)
