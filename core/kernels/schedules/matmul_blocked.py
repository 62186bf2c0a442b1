"""Cache-blocked GEMM over packed B: a register-tiled micro-kernel of mr rows x one panel of B.

Loop order: (batch, row block, column block) fused and parallel | k.o | panel j.o | row tile i.o |
k.i | i.i (unrolled) x j.i (vectorized). For one (row block, k.o) the A block (mc x kc) stays in L2;
each B micro-panel (kc x nr, contiguous in the packed layout) stays in L1 while all row tiles of the
block use it; the mr x nr accumulators stay in registers for the whole k.i loop (6 x 16 on AVX2: 12
ymm, two vector loads of B and six broadcasts of A per 12 FMAs). No tile needs a guard: the compute
padded M and N to whole tiles, and the blocks are chosen to divide.
"""
from __future__ import annotations

from typing import Optional, Sequence

from ...errors import ScheduleError
from ...target import Target
from ...te.schedule import Schedule
from ...te.tensor import ComputeOp, Tensor
from .epilogue import attach_point
from .generic import extent, parallelize, worth_parallel
from .util import divisor_near, find_ops

MC_ROWS = 120  # rows per block: the A block (120 x 256 floats, 120 KB) stays in L2 while B panels stream
# kc: K is split only from 1024 on (measured on znver3, one thread: 197 x 768 x 768 runs 97 GFLOP/s in one
# pass against 88 in kc = 384 blocks; a 48 KB micro-panel streams from L2 well enough, and every k
# block costs a load and store of the accumulators). Longer K is cut near 512 (32 KB panels).
K_TILE = 512


def k_block(k: int) -> Optional[int]:
    """kc dividing K (a guard on the reduce axis would sit in the micro-kernel); None: K in one pass."""
    return divisor_near(k, K_TILE // 2, 3 * K_TILE // 2) if k >= 2 * K_TILE else None


def row_block_tiles(tiles: int, mr: int) -> int:
    """Row tiles per block: a divisor near MC_ROWS rows (down to a third of them), else MC_ROWS rows
    and a guarded last block. Measured (znver3, 1500 x 32 @ 32 x 1504, one thread): 60-row blocks
    that divide run 1.9 ms, 120-row blocks with a guarded last one 3.6-12 ms."""
    most = max(1, MC_ROWS // mr)
    return min(tiles, divisor_near(tiles, most // 3 + 1, most) or most)


def column_blocks(outer: int, panels: int, cores: int) -> int:
    """How many blocks to cut the panels into so that the parallel loop has balanced work: the
    fewest (dividing the panel count) giving at least two chunks per core, evenly or many."""
    for d in range(1, panels + 1):
        if panels % d:
            continue
        chunks = outer * d
        if chunks >= 2 * cores and (chunks % cores == 0 or chunks >= 8 * cores):
            return d
    return panels


def schedule_blocked(sch: Schedule, op: ComputeOp, outs: Sequence[Tensor], target: Target,
                     row: Optional[int] = None, col: Optional[int] = None, k_tile: Optional[int] = None,
                     row_block: Optional[int] = None, col_blocks: Optional[int] = None,
                     k_unroll: Optional[int] = None) -> None:
    """Knobs: row (mr), col (nr, dividing the panel), k_tile (kc), row_block (row tiles per block: mc),
    col_blocks (blocks the micro-panels are cut into: nc = panels / col_blocks; parallel kernels
    only), k_unroll (an unroll pragma on the micro-kernel's k loop; 1 or None: LLVM decides)."""
    stage = sch[Tensor(op)]
    *batch, i, j = op.axis
    (k,) = op.reduce_axis
    panel, mr = op.attrs["panel"], row or op.attrs["rows"]
    nr = col or panel
    if i.extent % mr or panel % nr:
        raise ScheduleError(f"{op.name}: micro-tile {mr} x {nr} must divide the padded rows {i.extent} "
                            f"and the panel width {panel}")
    io, ii = stage.split(i, mr)
    rb = row_block or row_block_tiles(io.extent, mr)
    ib, io = stage.split(io, rb)
    jo, ji = stage.split(j, nr)
    kc = k_tile if k_tile and k_tile < k.extent else (None if k_tile else k_block(k.extent))
    parallel = worth_parallel(extent(op.axis) * k.extent, target)
    blocks = [*batch, ib]
    if parallel:
        cb = min(col_blocks, jo.extent) if col_blocks else column_blocks(extent(blocks), jo.extent, target.num_cores)
        if cb > 1:
            jb, jo = stage.split(jo, nparts=cb)
            blocks.append(jb)
    if kc:
        ko, ki = stage.split(k, kc)
        stage.reorder(*blocks, ko, jo, io, ki, ii, ji)
    else:
        ki = k
        stage.reorder(*blocks, jo, io, k, ii, ji)
    if k_unroll and k_unroll > 1:
        stage.pragma(ki, "unroll", k_unroll)
    stage.unroll(ii)
    stage.vectorize(ji)
    if parallel:
        parallelize(stage, blocks, target)
    for crop in find_ops(outs, ["matmul_crop"]):
        crop_stage = sch[Tensor(crop)]
        at = attach_point(stage)
        if any(t.op is crop for t in outs) and at is not None:
            crop_stage.reverse_compute_at(stage, at)  # the crop copies each finished block while in cache
        elif not any(t.op is crop for t in outs):
            crop_stage.compute_inline()  # read through by the fused epilogue
