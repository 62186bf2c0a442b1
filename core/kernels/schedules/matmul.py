"""CPU schedule of MatMul: register tile of rows (unrolled) x columns (vector lanes) around k.

Loop order batch, j.o, k.o, i.o | k.i | i.i (unrolled), j.i (vectorized): B's row segment for one
k is one vector load, each A element one broadcast, and the i.i x j.i accumulators stay in
registers for the whole k.i loop; a K_TILE x j.i panel of B stays in L1 while all row tiles use it.
Threads split the fused (batch, j.o) panels (or (batch, i.o, j.o) tiles when K is short).
Products over packed B (core/kernels/matmul_packed.py) get the cache-blocked micro-kernel of
matmul_blocked.py instead. A row tile that does not divide M accumulates in a local tile
(schedule_cached_tile, cache_write) so the guard stays out of the accumulation.
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


# Guarded remainder rows accumulate in a local tile (schedule_cached_tile) instead of in the output.
CACHED_REMAINDER_TILES = True
K_TILE = 128  # rows of B per pass: a 128 x 2-vector panel (16 KB) stays in L1 while the row tiles sweep it


def row_tile(m: int, vectors: int) -> int:
    """Rows per register tile. A guarded remainder row kept its accumulator in memory (LLVM does not
    unswitch the guard; schedule_cached_tile now avoids that), and a divisor of m wastes no rows, so
    one is preferred; 6 x 2 vectors is the best shape on AVX2."""
    budget = max(1, MAX_ACCUMULATORS // vectors)
    if m <= budget:
        return m
    return largest_divisor(m, [c for c in (6, 4, 5, 8, 3) if c <= budget]) or min(6, budget)


GEMV_SEGMENT = 4096  # most columns of one row of B a GEMV tile streams per k (its accumulators stay in L1)
GEMV_MIN_SEGMENT = 256  # fewest columns per segment when cutting for cores (1 KB runs; B's bandwidth is shared)


def gemv_columns(n: int, lanes: int, chunks: int = 1) -> int:
    """One row (a vector-matrix product) over a B that is not a constant (a constant one is packed into
    panels: packing.panels.worth_packing): B is read once, so the tile is a long segment of each row
    of B, streamed: n split into the fewest equal parts of at most GEMV_SEGMENT columns, `chunks` of
    them or more (one per core, while segments keep GEMV_MIN_SEGMENT columns), each a whole number of
    vectors or at least 4 (the vectorized loop runs a shorter last group). Measured on znver3, one
    thread, 1 x 1280 x 1000 (mobilenet_v2's classifier, 5 MB of weights): 5-vector tiles read B at
    3.2 GB/s (160-byte pieces of rows 4 KB apart), whole rows at 12-14 GB/s; 1 x 768 x 3072: 3.9
    GB/s against 11.2."""
    for parts in range(max(1, min(chunks, n // GEMV_MIN_SEGMENT), -(-n // GEMV_SEGMENT)), n // lanes + 1):
        jt = n // parts
        if n % parts == 0 and (jt % lanes == 0 or jt >= 4 * lanes):
            return jt
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
    parallel = worth_parallel(extent(op.axis) * k.extent, target)
    chunks = -(-target.num_cores // extent(batch)) if parallel else 1
    jt = col or (gemv_columns(j.extent, lanes, chunks) if i.extent == 1 else column_tile(j.extent, lanes))
    it = row or row_tile(i.extent, -(-jt // lanes))
    if CACHED_REMAINDER_TILES and i.extent % it and not (k_tile or k.extent >= 2 * K_TILE):
        return schedule_cached_tile(sch, op, target, it, jt, k_unroll)
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
    if parallel:
        parallelize(stage, outer, target)


def schedule_cached_tile(sch: Schedule, op: ComputeOp, target: Target, it: int, jt: int,
                         k_unroll: Optional[int] = None) -> None:
    """Rows that the row tile does not divide: the product accumulates in a local it x jt tile
    (cache_write, computed at the tile loop), written back to the output once per tile. In the
    plain nest the remainder guard sits among the unrolled rows and keeps every tile's accumulators
    in memory; here only the edge tiles are guarded (lowering splits inside from edge tiles), so
    the others keep theirs in registers."""
    out = Tensor(op)
    local = sch.cache_write(out, "local")
    stage = sch[out]
    *batch, i, j = op.axis
    io, ii = stage.split(i, it)
    jo, ji = stage.split(j, jt)
    stage.reorder(*batch, io, jo, ii, ji)
    stage.vectorize(ji)
    if worth_parallel(extent(op.axis) * op.reduce_axis[0].extent, target):
        parallelize(stage, [*batch, io, jo], target)
    tile_loop = stage.leaf_iter_vars[stage.leaf_iter_vars.index(ii) - 1]  # jo, or the fused parallel loop
    acc = sch[local]
    acc.compute_at(stage, tile_loop)
    *acc_batch, ai, aj = local.op.axis
    (ak,) = acc.reduce_axis
    acc.reorder(*acc_batch, ak, ai, aj)
    acc.unroll(ai)
    acc.vectorize(aj)
    if k_unroll and k_unroll > 1:
        acc.pragma(ak, "unroll", k_unroll)


def schedule_matmul(sch: Schedule, outs: Sequence[Tensor], target: Target, **knobs: int) -> None:
    """`knobs` (row, col, k_tile, k_unroll; row_block, col_blocks for packed B) come from a tuned config
    (core/tune/templates.py)."""
    for op in find_ops(outs, ["matmul_pack"]):  # B packed at run time: a parallel copy before the product
        injective_stage(sch[Tensor(op)], target)
    for op in find_ops(outs, ["matmul"]):
        if op.attrs.get("packed"):
            schedule_blocked(sch, op, outs, target, **knobs)
        else:
            schedule_matmul_stage(sch, op, target, **{k: v for k, v in knobs.items() if k not in ("row_block", "col_blocks")})
    for op in find_ops(outs, ["injective"]):  # the squeeze of 1-D operands
        output_stage(sch, op, outs, target)
