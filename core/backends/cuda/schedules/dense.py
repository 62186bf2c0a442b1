"""GPU MatMul (batched, numpy broadcasting): a plain compute (none of the CPU's packed B panels) and
a shared-memory tiled schedule, as `tiled_matmul` in the NVPTX tests plus register tiles.

Each block computes an (m_threads * m_reg) x (n_threads * n_reg) tile of one batch entry; a thread
holds m_reg x n_reg accumulators (cache_write "local"). Per k_tile step the block's threads copy the
A and B slices into shared memory together (rows of A along k, rows of B along n: consecutive
threadIdx.x, consecutive addresses), A's rows padded so the threads of a warp reading one column hit
different banks. The kernel's output stage (bias, GELU, residual Add) reads the register tile.
Float16 operands summed in float32 (`accumulate`) take the tensor cores where tiles fit (dense_tensorcore.py).
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ....target import CUDA_KIND
from ....errors import ScheduleError, ShapeError
from ....graph.ir import TensorType
from ....target import Target
from ....te import tensor as te
from ....te.schedule import Schedule, Stage
from ....te.tensor import ComputeOp, Tensor, TensorRead
from ....tir.expr import cast, const
from ....tir.functor import walk_expr
from ....kernels.broadcast import broadcast_shape
from ....kernels.common import require
from ....kernels.matmul import matmul as cpu_matmul
from ....kernels.registry import register_compute
from ....kernels.schedules.util import find_op
from . import dense_tensorcore as tensorcore
from . import gemv
from .launch import (cooperative_fetch, inline_intermediates, output_stages, reduction_producers, reject_extern,
                     thread_tiles)
from .reduce import one_thread_per_output

TARGET_BLOCKS = 132  # one block per SM of an H100 at least, before register tiles grow


@register_compute("MatMul", CUDA_KIND)
def matmul_gpu(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    a, b = require(inputs, 2, "MatMul")
    if attrs.get("packed_columns") is not None:
        raise ShapeError("MatMul: packed weights are a CPU layout (pack_matmul_weights does not run for cuda)")
    if attrs.get("accumulate"):  # float16 operands summed in float32 (half_matmul_operands): tensor cores
        return [widening_matmul(a, b, attrs["accumulate"])]
    # The CPU compute without its packed-B panels; matrix-vector products keep their squeeze stage.
    return [cpu_matmul(a, b, may_pack=False)]


def widening_matmul(a: te.Tensor, b: te.Tensor, accumulate: str) -> te.Tensor:
    """[..., M, K] x [..., K, N] (batch dimensions broadcast), each product and the sum in `accumulate`."""
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"MatMul: cannot multiply {list(a.shape)} by {list(b.shape)}")
    batch = broadcast_shape("MatMul", a.shape[:-2], b.shape[:-2])
    rk = te.reduce_axis(a.shape[-1], "rk")

    def operand(t: te.Tensor, bi, rows, cols):
        off = len(batch) - (t.ndim - 2)
        return t(*[const(0, "int64") if d == 1 else bi[off + q] for q, d in enumerate(t.shape[:-2])], rows, cols)

    def body(*idx):
        bi, i, j = idx[:-2], idx[-2], idx[-1]
        return te.sum(cast(accumulate, operand(a, bi, i, rk.var)) * cast(accumulate, operand(b, bi, rk.var, j)), rk)

    return te.compute(batch + (a.shape[-2], b.shape[-1]), body, name="matmul", tag="matmul")


def default_tiles(op: ComputeOp) -> dict[str, int]:
    """8 x 8 threads with up to 4 x 4 outputs each; register tiles shrink until the grid has about
    TARGET_BLOCKS blocks (small products: bert's 64 x 128 needs many small tiles, not a few big ones)."""
    *batch, m, n = op.shape
    k = op.reduce_axis[0].extent
    nb = 1
    for d in batch:
        nb *= d
    m_threads, n_threads = min(8, m), min(16 if m <= 8 else 8, n)
    m_reg, n_reg = 4, 4

    def blocks(mr: int, nr: int) -> int:
        return nb * -(-m // (m_threads * mr)) * -(-n // (n_threads * nr))

    while (m_reg > 1 or n_reg > 1) and blocks(m_reg, n_reg) < TARGET_BLOCKS:
        if m_reg >= n_reg:
            m_reg //= 2
        else:
            n_reg //= 2
    m_reg, n_reg = min(m_reg, -(-m // m_threads)), min(n_reg, -(-n // n_threads))
    return {"m_threads": m_threads, "m_reg": m_reg, "n_threads": n_threads, "n_reg": n_reg, "k_tile": min(k, 16)}


def _operands(op: ComputeOp) -> tuple[Tensor, Tensor]:
    rk = op.reduce_axis[0].var
    reads = [e for e in walk_expr(op.body) if isinstance(e, TensorRead)]
    a = next(e.tensor for e in reads if e.indices[-1] is rk)
    b = next(e.tensor for e in reads if e.indices[-2] is rk and e.tensor is not a)
    return a, b


def _output(sch: Schedule, mm: ComputeOp, outs: Sequence[Tensor]) -> Optional[Stage]:
    for stage in output_stages(sch, outs):
        if stage.op is mm or (stage.op.shape == mm.shape and any(p.op is mm for p in reduction_producers(sch, stage.op))):
            return stage
    return None


def schedule_matmul(sch: Schedule, outs: Sequence[Tensor], target: Target, **knobs: int) -> None:
    """knobs: m_threads, m_reg, n_threads, n_reg, k_tile (defaults: default_tiles); products of at most
    gemv.MAX_ROWS rows take gemv.schedule_gemv (knob: k_split) unless tile knobs are given."""
    reject_extern(sch, target)
    mm = find_op(outs, "matmul")
    if mm is None:
        raise ScheduleError("schedule_matmul (cuda): the kernel has no matmul stage")
    for stage in output_stages(sch, outs):
        inline_intermediates(sch, stage, outs)
    out = _output(sch, mm, outs)
    if out is None or len(mm.shape) < 2:  # a matrix-vector product, or an epilogue of another shape
        for stage in output_stages(sch, outs):
            one_thread_per_output(sch, stage, target)
        return
    if gemv.applies(mm) and not knobs.keys() - {"k_split"}:  # one row (or a few): split the reduction instead
        gemv.schedule_gemv(sch, mm, out, **knobs)
        return
    a, b = _operands(mm)
    mma = tensorcore.default_tiles(mm, target) if out.op.shape == mm.shape else None
    if mma is not None and (not knobs or "warps" in knobs):  # float16 operands: a tensor-core tile per warp
        tensorcore.schedule_tensorcore_matmul(sch, mm, out, a, b, target, **{**mma, **knobs})
        return
    t = {**default_tiles(mm), **knobs}
    mm_t = Tensor(mm)
    a_shared = sch.cache_read(a, "shared", [mm_t])
    b_shared = sch.cache_read(b, "shared", [mm_t])
    local = sch.cache_write(mm_t, "local")
    if out.op is not mm:
        sch[mm_t].compute_inline()

    *batch, i, j = out.op.axis
    bi, bj = tile_gemm(sch, out, local, (i, t["m_threads"], t["m_reg"]), (j, t["n_threads"], t["n_reg"]), t["k_tile"],
                       (a_shared, b_shared), outer=batch, bank_padded=a_shared)
    if batch:
        out.bind(out.fuse(*batch) if len(batch) > 1 else batch[0], "blockIdx.z")
    out.bind(bi, "blockIdx.y")
    out.bind(bj, "blockIdx.x")


def tile_gemm(sch: Schedule, out: Stage, local: Tensor, rows: tuple, cols: tuple, k_tile: int,
              copies: Sequence[Tensor], outer: Sequence = (), bank_padded: Optional[Tensor] = None):
    """Tile `out`'s (rows, cols) axes, each given as (axis, threads, registers): a block of
    threads x threads computes a tile, each thread registers x registers outputs accumulated in
    `local` (computed per thread, its reduction split by `k_tile`); every k step the block fetches
    `copies` into shared memory together. Binds the threads; returns the two block loops (rows,
    cols), placed after `outer`, for the caller to bind."""
    (bi, bj), (ti, tj) = thread_tiles(out, (rows, cols), outer)

    ls = sch[local]
    (rk,) = ls.reduce_axis
    ko, ki = ls.split(rk, k_tile)
    ls.reorder(ko, ki, *ls.op.axis)
    ls.compute_at(out, tj)
    for iv in ls.op.axis[-2:]:
        ls.unroll(iv)
    threads = (("threadIdx.y", ti.extent), ("threadIdx.x", tj.extent))
    for copy in copies:
        stage = sch[copy]
        stage.compute_at(ls, ko)
        if copy is bank_padded and ki.extent > 1:
            # Read down a column (one k, the block's rows): pad its rows off the bank period.
            stage.storage_align(stage.op.axis[-2], 32, 1)
        cooperative_fetch(stage, threads)
    return bi, bj
