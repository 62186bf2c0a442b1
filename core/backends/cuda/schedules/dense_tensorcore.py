"""GPU MatMul on tensor cores: float16 operands, float32 sums (half_matmul_operands), each warp's tile computed
by mma.sync (core/te/intrinsics.py) through tensorize.

A block of `warps` warps computes a (mma_m * 16) x (warps * 8) tile; each warp mma_m 16 x 8 tiles stacked along
the rows (a warp's 8 columns). Lane l = 4 g + t holds the outputs of rows g * 2 mma_m .. + 2 mma_m - 1 of its warp's
rows (two per mma tile: rows g and g + 8 of the instruction's A, however the lane's rows lie) and columns 2t, 2t+1
of its warp's 8: the fragment layout the intrinsic declares. Per k_tile step the block copies the A and B slices
into shared memory (A's rows padded off the bank period), then each warp runs k_tile / 16 x mma_m instructions.
Every lane of every warp must reach each mma.sync: tiles divide the product exactly, or the schedule does not apply.
`tensor_cores=0` keeps the same loops without the intrinsic (what a CPU can emulate and a GPU without them runs).
"""
from __future__ import annotations

from typing import Mapping, Optional

from ....target import Target
from ....te.schedule import Schedule, Stage
from ....te.tensor import ComputeOp, Tensor, TensorRead
from ....te.intrinsics import TensorIntrinsic, intrinsics_for
from ....tir.functor import walk_expr
from .launch import cooperative_fetch

MMA_M, MMA_N, MMA_K = 16, 8, 16
LANES = 32
A_ROW_PAD = 8  # halves: keeps a row's 32-bit pairs aligned and moves consecutive rows off the same banks


def mma_intrinsic(target: Target) -> Optional[TensorIntrinsic]:
    """The target's warp-wide float16 x float16 -> float32 matrix instruction (chosen by its features), or None."""
    found = intrinsics_for(target, lambda i: i.warp_collective and i.op.dtype == "float32"
                           and {t.dtype for t in i.inputs} == {"float16"})
    return found[0] if found else None


def half_operands(op: ComputeOp) -> bool:
    """A float32 matmul of float16 operands (the cuda compute for `accumulate`)."""
    reads = [e for e in walk_expr(op.body) if isinstance(e, TensorRead)]
    return op.dtype == "float32" and len(reads) == 2 and all(r.tensor.dtype == "float16" for r in reads)


def default_tiles(op: ComputeOp, target: Target) -> Optional[dict[str, int]]:
    """The largest tiles that divide the product, or None when tensor cores do not apply: not float16 operands,
    a target without mma.sync, or a product the 16 x 8 x 16 steps do not divide."""
    *_, m, n = op.shape
    k = op.reduce_axis[0].extent
    if (len(op.shape) < 2 or not half_operands(op) or m % MMA_M or n % MMA_N or k % MMA_K
            or mma_intrinsic(target) is None):
        return None
    mma_m = next(r for r in (4, 2, 1) if m % (MMA_M * r) == 0)
    warps = next(w for w in (4, 2, 1) if n % (MMA_N * w) == 0)
    k_tile = 32 if k % 32 == 0 else 16
    return {"warps": warps, "mma_m": mma_m, "k_tile": k_tile, "tensor_cores": 1}


def shared_bytes(knobs: Mapping[str, int]) -> int:
    rows, columns = knobs["mma_m"] * MMA_M, knobs["warps"] * MMA_N
    return 2 * (knobs["k_tile"] * (rows + columns) + rows * A_ROW_PAD)


def fits(op: ComputeOp, knobs: Mapping[str, int], target: Target) -> bool:
    """Whether these tiles divide the product exactly (every lane reaches every mma.sync) and fit the target."""
    *_, m, n = op.shape
    k = op.reduce_axis[0].extent
    return (m % (knobs["mma_m"] * MMA_M) == 0 and n % (knobs["warps"] * MMA_N) == 0 and k % knobs["k_tile"] == 0
            and knobs["k_tile"] % MMA_K == 0 and LANES * knobs["warps"] <= target.max_threads_per_block
            and shared_bytes(knobs) <= target.max_shared_bytes)


def schedule_tensorcore_matmul(sch: Schedule, mm: ComputeOp, out: Stage, a: Tensor, b: Tensor, target: Target,
                               warps: int, mma_m: int, k_tile: int, tensor_cores: int = 1) -> None:
    """Threads: threadIdx.x = t (4), threadIdx.y = g (8), so that a warp's lane is 4 g + t, and threadIdx.z the
    warp (never one fused lane axis: bounds inference would then see the lane under a division and copy whole
    operands into shared memory)."""
    mm_t = Tensor(mm)
    a_shared = sch.cache_read(a, "shared", [mm_t])
    b_shared = sch.cache_read(b, "shared", [mm_t])
    local = sch.cache_write(mm_t, "local")
    if out.op is not mm:
        sch[mm_t].compute_inline()

    *batch, i, j = out.op.axis
    bi, i_in = out.split(i, mma_m * MMA_M)
    g, i_lane = out.split(i_in, 2 * mma_m)  # a lane's rows: 2 per mma tile, adjacent
    bj, j_in = out.split(j, warps * MMA_N)
    warp, j_warp = out.split(j_in, MMA_N)
    t, e = out.split(j_warp, 2)
    out.reorder(*batch, bi, bj, warp, g, t, i_lane, e)
    if batch:
        out.bind(out.fuse(*batch) if len(batch) > 1 else batch[0], "blockIdx.z")
    out.bind(bi, "blockIdx.y")
    out.bind(bj, "blockIdx.x")
    out.bind(warp, "threadIdx.z")
    out.bind(g, "threadIdx.y")
    out.bind(t, "threadIdx.x")
    out.unroll(i_lane)
    out.unroll(e)

    ls = sch[local]
    (rk,) = ls.reduce_axis
    *_, li, lj = ls.op.axis
    ko, k_in = ls.split(rk, k_tile)
    kk, k16 = ls.split(k_in, MMA_K)
    tile, h = ls.split(li, 2)
    ls.reorder(ko, kk, tile, h, lj, k16)
    ls.compute_at(out, t)
    ls.unroll(tile)
    if tensor_cores:
        ls.tensorize(h, mma_intrinsic(target))
    else:
        ls.unroll(h)
        ls.unroll(lj)
    threads = (("threadIdx.z", warps), ("threadIdx.y", LANES // 4), ("threadIdx.x", 4))
    for copy in (a_shared, b_shared):
        stage = sch[copy]
        stage.compute_at(ls, ko)
        if copy is a_shared:
            stage.storage_align(stage.op.axis[-2], k_tile, A_ROW_PAD)
        cooperative_fetch(stage, threads)
