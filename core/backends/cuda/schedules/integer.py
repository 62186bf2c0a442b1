"""GPU int8 MatMul (MatMulIntegerPacked: weights packed at compile time for CUDA's dp4a, one column's four k bytes
contiguous): each thread accumulates rows_reg x cols_reg int32 outputs, one dp4a (four u8/s8 x s8 products) per call
of the tensorized nest. Per k_tile step the block copies the activation rows (or their shifted, padded `int8_data`
form) and the weight columns into shared memory; each weight column's slice is padded by 4 bytes so that the 32
threads of a warp, reading 32 columns, hit 32 different banks. Requantize and the rest of the epilogue run on the
register tile. Columns are never split unevenly (a guard inside the tensorized nest is refused); rows may be.
"""
from __future__ import annotations

from typing import Optional, Sequence

from ....errors import ScheduleError
from ....target import Target
from ....te.schedule import Schedule, Stage
from ....te.tensor import ComputeOp, PlaceholderOp, Tensor, TensorRead
from ....te.intrinsics import get_intrinsic
from ....tir.functor import walk_expr
from ....kernels.schedules.util import find_op
from .launch import cooperative_fetch, inline_intermediates, output_stages, reject_extern, thread_tiles
from .reduce import one_thread_per_output

TARGET_BLOCKS = 132
WEIGHT_PAD = 4  # bytes after each column's k_tile slice in shared memory: consecutive columns, different banks


def _divisor_at_most(n: int, most: int) -> int:
    return next(d for d in range(min(n, most), 0, -1) if n % d == 0)


def default_tiles(op: ComputeOp) -> dict[str, int]:
    """A block of up to 8 row threads x 32 column threads (column tiles divide the columns), registers shrinking
    until the grid has about TARGET_BLOCKS blocks; k_tile 64 bytes (or the whole depth)."""
    *batch, m, n = op.shape
    depth = op.reduce_axis[0].extent * op.reduce_axis[1].extent
    nb = 1
    for d in batch:
        nb *= d
    col_threads = _divisor_at_most(n, 32)
    row_threads = min(8, m)
    rows_reg, cols_reg = 4, _divisor_at_most(n // col_threads, 4)

    def blocks(rr: int, cr: int) -> int:
        return nb * -(-m // (row_threads * rr)) * (n // (col_threads * cr))

    while blocks(rows_reg, cols_reg) < TARGET_BLOCKS and (rows_reg > 1 or cols_reg > 1):
        if rows_reg >= cols_reg:
            rows_reg //= 2
        else:
            cols_reg = _divisor_at_most(n // col_threads, cols_reg // 2)
    rows_reg = min(rows_reg, -(-m // row_threads))
    return {"row_threads": row_threads, "rows_reg": rows_reg, "col_threads": col_threads, "cols_reg": cols_reg,
            "k_tile": min(64, depth)}


def _packed_weights(dot: ComputeOp) -> Tensor:
    return next(e.tensor for e in walk_expr(dot.body) if isinstance(e, TensorRead) and e.tensor.ndim == 4)


def _activations(dot: ComputeOp) -> Tensor:
    return next(e.tensor for e in walk_expr(dot.body) if isinstance(e, TensorRead) and e.tensor.ndim != 4)


def schedule_matmul_integer(sch: Schedule, outs: Sequence[Tensor], target: Target, **knobs: int) -> None:
    """knobs: row_threads, rows_reg, col_threads, cols_reg, k_tile (bytes, a multiple of 4; defaults: default_tiles);
    dp4a=0 keeps the same loops without the instruction (what a CPU can emulate)."""
    reject_extern(sch, target)
    dot = find_op(outs, "int8_dot")
    if dot is None:
        raise ScheduleError("schedule_matmul_integer (cuda): the kernel has no int8_dot stage")
    intrinsic = get_intrinsic(dot.attrs["intrinsic"])
    if intrinsic.arch != "nvptx64" or intrinsic.lanes != 1:
        raise ScheduleError(f"schedule_matmul_integer (cuda): weights packed for {intrinsic.name}, not dp4a")
    for stage in output_stages(sch, outs):
        inline_intermediates(sch, stage, outs, keep_tags=("int8_data",))
    out: Optional[Stage] = next((s for s in output_stages(sch, outs) if s.op.shape[:-1] == dot.shape[:-1]), None)
    if out is None:
        raise ScheduleError("schedule_matmul_integer (cuda): no output has the product's rows")
    for stage in output_stages(sch, outs):
        if stage is not out:
            one_thread_per_output(sch, stage, target)
    t = {**default_tiles(dot), **knobs}
    if out.op.shape[-1] % (t["col_threads"] * t["cols_reg"]) or t["k_tile"] % 4:
        raise ScheduleError(f"schedule_matmul_integer (cuda): {t} splits the columns unevenly or k by partial groups")
    dot_t = Tensor(dot)
    acc = sch[dot_t]
    acc.set_scope("local")
    data = _activations(dot)
    if isinstance(data.op, PlaceholderOp):
        data_shared = sch.cache_read(data, "shared", [dot_t])
    else:  # int8_data: the activations shifted into dp4a's data type and padded to whole groups of 4
        sch[data].set_scope("shared")
        data_shared = data
    weights_shared = sch.cache_read(_packed_weights(dot), "shared", [dot_t])

    *batch, i, j = out.op.axis
    (bi, bj), (ti, tj) = thread_tiles(out, ((i, t["row_threads"], t["rows_reg"]), (j, t["col_threads"], t["cols_reg"])),
                                      batch)
    if batch:
        out.bind(out.fuse(*batch) if len(batch) > 1 else batch[0], "blockIdx.z")
    out.bind(bi, "blockIdx.y")
    out.bind(bj, "blockIdx.x")

    *_, ai, aj = acc.op.axis
    groups, ki = acc.reduce_axis
    ko, k_in = acc.split(groups, t["k_tile"] // 4)
    jo, ji = acc.split(aj, intrinsic.lanes)
    acc.reorder(ko, k_in, ai, jo, ji, ki)
    acc.compute_at(out, tj)
    acc.unroll(ai)
    acc.unroll(jo)
    if t.get("dp4a", 1):
        acc.tensorize(ji, intrinsic)
    threads = (("threadIdx.y", ti.extent), ("threadIdx.x", tj.extent))
    for copy in (data_shared, weights_shared):
        stage = sch[copy]
        stage.compute_at(acc, ko)
        if copy is weights_shared and t["k_tile"] > WEIGHT_PAD:
            stage.storage_align(stage.op.axis[0], t["k_tile"], WEIGHT_PAD)
        cooperative_fetch(stage, threads)


def default_conv_tiles(op: ComputeOp) -> dict[str, int]:
    """Output channels: threads and registers that divide them (a guard may not reach the tensorized nest); rows and
    columns: about 4 x 8 threads with 2 x 2 outputs each where the image is large enough; 8 channel groups (32
    channels) per shared step."""
    n, oh, ow_c, channels = op.shape
    o_threads = _divisor_at_most(channels, 8)
    o_reg = _divisor_at_most(channels // o_threads, 2)
    y_reg, x_reg = (2 if oh >= 8 else 1), (2 if ow_c >= 16 else 1)
    y_threads = min(4, -(-oh // y_reg))
    x_threads = min(8, -(-ow_c // x_reg))
    return {"o_threads": o_threads, "o_reg": o_reg, "y_threads": y_threads, "y_reg": y_reg, "x_threads": x_threads,
            "x_reg": x_reg, "c_groups": 8}


def schedule_conv_integer(sch: Schedule, outs: Sequence[Tensor], target: Target, **knobs: int) -> None:
    """ConvIntegerPacked: threads (z, y, x) = (output channels, rows, columns), each o_reg x y_reg x x_reg int32
    accumulators; per step of c_groups groups of 4 input channels the block builds its window of `int8_data`
    (zero-point-shifted, padded, channels-last: four channels of a pixel contiguous) in shared memory, and each
    dp4a multiplies them by one output channel's four packed weights (read through the caches). knobs:
    o_threads, o_reg, y_threads, y_reg, x_threads, x_reg, c_groups; dp4a=0: the same loops without it."""
    reject_extern(sch, target)
    dot = find_op(outs, "int8_dot")
    data = find_op(outs, "int8_data")
    if dot is None or data is None or dot.attrs.get("conv_columns") is None:
        raise ScheduleError("schedule_conv_integer (cuda): the kernel has no packed conv (int8_data, int8_dot)")
    intrinsic = get_intrinsic(dot.attrs["intrinsic"])
    for stage in output_stages(sch, outs):
        inline_intermediates(sch, stage, outs, keep_tags=("int8_data",))
    out = next((s for s in output_stages(sch, outs) if len(s.op.shape) == 4 and s.op.shape[1] == dot.shape[3]), None)
    if out is None:
        raise ScheduleError("schedule_conv_integer (cuda): no NCHW output has the conv's channels")
    for stage in output_stages(sch, outs):
        if stage is not out:
            one_thread_per_output(sch, stage, target)
    t = {**default_conv_tiles(dot), **knobs}
    if dot.shape[3] % (t["o_threads"] * t["o_reg"]):
        raise ScheduleError(f"schedule_conv_integer (cuda): {t} splits the {dot.shape[3]} channels unevenly")
    dot_t = Tensor(dot)
    acc = sch[dot_t]
    acc.set_scope("local")
    sch[Tensor(data)].set_scope("shared")

    b, o, y, x = out.op.axis
    (bo, by, bx), (to, ty, tx) = thread_tiles(out, [(axis, t[f"{name}_threads"], t[f"{name}_reg"])
                                                    for axis, name in ((o, "o"), (y, "y"), (x, "x"))], (b,))
    out.bind(out.fuse(b, bo), "blockIdx.z")
    out.bind(by, "blockIdx.y")
    out.bind(bx, "blockIdx.x")

    _, ay, ax, ao = acc.op.axis
    r, q, groups, ki = acc.reduce_axis
    co, c_in = acc.split(groups, t["c_groups"])
    oo, oi = acc.split(ao, intrinsic.lanes)
    acc.reorder(co, r, q, c_in, ay, ax, oo, oi, ki)
    acc.compute_at(out, tx)
    for iv in (ay, ax, oo):
        acc.unroll(iv)
    if t.get("dp4a", 1):
        acc.tensorize(oi, intrinsic)
    fill = sch[Tensor(data)]
    fill.compute_at(acc, co)
    cooperative_fetch(fill, (("threadIdx.z", to.extent), ("threadIdx.y", ty.extent), ("threadIdx.x", tx.extent)))
