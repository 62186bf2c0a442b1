"""GPU matrix-vector products (MatMul with one or a few rows: the classifier of resnet18 and
mobilenet_v2): a block of (k_split x 32) threads per 32 output columns. Each thread sums a strided
slice of k for one column (a warp reads 32 consecutive columns of a row of B: coalesced) into shared
memory; the output stage (and its fused epilogue) adds the k_split partial sums of its column.

Tiles of rows x columns leave a single-row product with one row of threads and few blocks; here the
reduction itself is spread over a block's threads instead."""
from __future__ import annotations

from ....errors import ScheduleError
from ....te import tensor as te
from ....te.schedule import Schedule, Stage
from ....te.tensor import ComputeOp, Reduce, Tensor, TensorRead
from ....tir.expr import IntImm, const, minimum, select
from ....tir.functor import substitute

MAX_ROWS = 4  # products with at most this many rows (times the batch) take this schedule
COLUMNS = 32  # one warp of consecutive columns
DEFAULT_K_SPLIT = 16  # threads sharing one column's reduction when untuned


def applies(mm: ComputeOp) -> bool:
    rows = 1
    for d in mm.shape[:-1]:
        rows *= d
    return rows <= MAX_ROWS and mm.reduce_axis[0].extent >= 64


def schedule_gemv(sch: Schedule, mm: ComputeOp, out: Stage, k_split: int = DEFAULT_K_SPLIT) -> None:
    """`out`: the kernel output reading `mm` at its own point (or mm itself); knob: k_split, the
    threads (threadIdx.y) sharing one column's reduction."""
    stage = sch[Tensor(mm)]
    body = stage.body
    if not isinstance(body, Reduce) or len(body.axis) != 1:
        raise ScheduleError(f"{mm.name}: not a single-axis matmul reduction")
    (rk,) = body.axis
    length = rk.extent
    chunks = -(-length // k_split)
    *outer, n = mm.shape

    def partial_body(*idx):
        *rest, t, j = idx
        kk = te.reduce_axis(chunks, "kk")
        flat = kk.var * k_split + t
        k = minimum(flat, const(length - 1, "int64")) if chunks * k_split != length else flat
        point = {ax.var: v for ax, v in zip(mm.axis, list(rest) + [j])}
        point[rk.var] = k
        value = substitute(body.source, point)
        if chunks * k_split != length:
            value = select(flat < length, value, body.init)
        return te.sum(value, kk)

    partial = te.compute(tuple(outer) + (k_split, n), partial_body, name=f"{mm.name}.ksplit", tag="gemv_partial")
    sch.add_stage(Stage(partial.op, list(partial.op.axis) + list(partial.op.reduce_axis), scope="shared"),
                  before=stage)
    rows = [ax.var for ax in mm.axis[:-1]]
    total = TensorRead(partial, tuple(rows) + (IntImm(0), mm.axis[-1].var))
    for t in range(1, k_split):  # an explicit sum (not a reduction), so the stage can be inlined
        total = total + TensorRead(partial, tuple(rows) + (IntImm(t), mm.axis[-1].var))
    stage.body_override = total
    stage.leaf_iter_vars = list(mm.axis)
    if out.op is not mm:
        stage.compute_inline()

    *out_rows, j = out.op.axis
    row = out.fuse(*out_rows) if len(out_rows) > 1 else out_rows[0]
    bj, tj = out.split(j, COLUMNS)
    out.reorder(row, bj, tj)
    out.bind(row, "blockIdx.y")
    out.bind(bj, "blockIdx.x")
    out.bind(tj, "threadIdx.x")
    ps = sch[partial]
    ps.compute_at(out, bj)
    *p_rows, t, pj = ps.op.axis
    (kk,) = ps.reduce_axis
    p_row = ps.fuse(*p_rows) if len(p_rows) > 1 else p_rows[0]
    ps.reorder(p_row, t, pj, kk)
    ps.bind(t, "threadIdx.y")
    ps.bind(pj, "threadIdx.x")
