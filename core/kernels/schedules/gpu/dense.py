"""GPU MatMul (batched, numpy broadcasting): a plain compute (none of the CPU's packed B panels) and
a shared-memory tiled schedule, as `tiled_matmul` in the NVPTX tests plus register tiles.

Each block computes an (m_threads * m_reg) x (n_threads * n_reg) tile of one batch entry; a thread
holds m_reg x n_reg accumulators (cache_write "local"). Per k_tile step the block's threads copy the
A and B slices into shared memory together (rows of A along k, rows of B along n: consecutive
threadIdx.x, consecutive addresses), A's rows padded so the threads of a warp reading one column hit
different banks. The kernel's output stage (bias, GELU, residual Add) reads the register tile.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ....errors import ScheduleError, ShapeError
from ....graph.ir import TensorType
from ....target import Target
from ....te import tensor as te
from ....te.schedule import Schedule, Stage
from ....te.tensor import ComputeOp, Tensor, TensorRead
from ....tir.expr import Expr, const
from ....tir.functor import walk_expr
from ...broadcast import broadcast_shape
from ...common import require
from ...matmul import matmul as cpu_matmul
from ...registry import register_compute
from ..util import find_op
from . import gemv
from .conv2d import cooperative_fetch
from .launch import inline_intermediates, output_stages, reduction_producers, reject_extern
from .reduce import one_thread_per_output

TARGET_BLOCKS = 132  # one block per SM of an H100 at least, before register tiles grow


def batch_matmul(a: te.Tensor, b: te.Tensor) -> te.Tensor:
    """C[..., i, j] = sum_k A[..., i, k] * B[..., k, j] (both operands at least 2-D), tag matmul."""
    m, k = a.shape[-2:]
    k2, n = b.shape[-2:]
    if k != k2:
        raise ShapeError(f"MatMul: inner dimensions differ: {list(a.shape)} @ {list(b.shape)}")
    batch = broadcast_shape("MatMul", a.shape[:-2], b.shape[:-2])
    nb = len(batch)
    rk = te.reduce_axis(k, "rk")
    zero = const(0, "int64")

    def operand_batch(shape: Sequence[int], bi: Sequence[Expr]) -> list[Expr]:
        off = nb - (len(shape) - 2)
        return [zero if d == 1 else bi[off + q] for q, d in enumerate(shape[:-2])]

    def body(*idx: Expr) -> Expr:
        bi, i, j = idx[:nb], idx[nb], idx[nb + 1]
        return te.sum(a(*operand_batch(a.shape, bi), i, rk.var) * b(*operand_batch(b.shape, bi), rk.var, j), rk)

    return te.compute(tuple(batch) + (m, n), body, name="matmul", tag="matmul")


@register_compute("MatMul", "cuda")
def matmul_gpu(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    a, b = require(inputs, 2, "MatMul")
    if attrs.get("packed_columns") is not None:
        raise ShapeError("MatMul: packed weights are a CPU layout (pack_matmul_weights does not run for cuda)")
    if a.ndim < 2 or b.ndim < 2:  # matrix-vector: the default compute (never packed), one thread per output
        return [cpu_matmul(a, b)]
    return [batch_matmul(a, b)]


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
    t = {**default_tiles(mm), **knobs}
    mm_t = Tensor(mm)
    a, b = _operands(mm)
    a_shared = sch.cache_read(a, "shared", [mm_t])
    b_shared = sch.cache_read(b, "shared", [mm_t])
    local = sch.cache_write(mm_t, "local")
    if out.op is not mm:
        sch[mm_t].compute_inline()

    *batch, i, j = out.op.axis
    bi, i_in = out.split(i, t["m_threads"] * t["m_reg"])
    ti, ir = out.split(i_in, t["m_reg"])
    bj, j_in = out.split(j, t["n_threads"] * t["n_reg"])
    tj, jr = out.split(j_in, t["n_reg"])
    out.reorder(*batch, bi, bj, ti, tj, ir, jr)
    if batch:
        out.bind(out.fuse(*batch) if len(batch) > 1 else batch[0], "blockIdx.z")
    out.bind(bi, "blockIdx.y")
    out.bind(bj, "blockIdx.x")
    out.bind(ti, "threadIdx.y")
    out.bind(tj, "threadIdx.x")
    out.unroll(ir)
    out.unroll(jr)

    ls = sch[local]
    (rk,) = ls.reduce_axis
    ko, ki = ls.split(rk, t["k_tile"])
    ls.reorder(ko, ki, *ls.op.axis)
    ls.compute_at(out, tj)
    for iv in ls.op.axis[-2:]:
        ls.unroll(iv)
    threads = (("threadIdx.y", ti.extent), ("threadIdx.x", tj.extent))
    for copy in (a_shared, b_shared):
        stage = sch[copy]
        stage.compute_at(ls, ko)
        if copy is a_shared and ki.extent > 1:
            # A is read down a column (one k, the block's rows): pad its rows off the bank period.
            stage.storage_align(stage.op.axis[-2], 32, 1)
        cooperative_fetch(stage, threads)
