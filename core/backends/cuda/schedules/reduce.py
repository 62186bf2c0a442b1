"""GPU reductions: one thread per output (short reductions, many outputs), and a cooperative block
reduction (each thread of a block reduces a strided slice, then a tree through shared memory) for
long reductions with few outputs: Softmax and LayerNormalization rows, ReduceMean, global pools."""
from __future__ import annotations

from typing import Optional, Sequence

from ....errors import ScheduleError
from ....target import Target
from ....te.schedule import Schedule, Stage
from ....te.tensor import IterVar, Reduce, Tensor, TensorRead
from ....tir.expr import IntImm, const, minimum, select
from ....tir.functor import substitute
from .launch import bind_flat, inline_intermediates, is_scheduled, output_stages, reduction_producers, reject_extern, threads_of

COOPERATIVE_MIN = 256  # reduction length from which a block of threads shares one output
COOPERATIVE_MAX_OUTPUTS = 4096  # with more outputs than this, one thread each already fills the GPU


def reduce_length(stage: Stage) -> int:
    n = 1
    for iv in stage.reduce_axis:
        n *= iv.extent
    return n


def output_count(stage: Stage) -> int:
    n = 1
    for iv in stage.op.axis:
        n *= iv.extent
    return n


def block_threads(length: int, target: Target, most: int = 256) -> int:
    """A power of two (the tree halves it), at most `most`, no more than the reduction needs."""
    t = 32
    while t < min(length, threads_of(target, most)):
        t *= 2
    return min(t, threads_of(target, most))


def _tree_stage(sch: Schedule, src: Tensor, rows: tuple[int, ...], width: int, combine, name: str,
                before: Stage) -> Tensor:
    """out[rows..., t] = combine(src[rows..., t], src[rows..., t + width]) for t < width, in shared memory."""
    def body(*idx):
        *r, t = idx
        return combine(src(*r, t), src(*r, t + width))

    from ....te import tensor as te

    out = te.compute(rows + (width,), body, name=name, tag="gpu_reduce_tree")
    sch.add_stage(Stage(out.op, list(out.op.axis), scope="shared"), before=before)
    return out


def cross_thread_reduce(sch: Schedule, stage: Stage, threads: int,
                        consumer: Optional[tuple[Stage, IterVar]] = None) -> tuple[Optional[IterVar], list[Stage]]:
    """Rewrite reduction `stage` as a block of `threads` threads cooperating on each output:

        partial[out, t] = combine over j of source(k = j * threads + t)   (k < K; coalesced reads)
        tree_w[out, t]  = combine(tree_2w[out, t], tree_2w[out, t + w])   (w = threads/2 .. 2)
        stage[out]      = combine(tree_2[out, 0], tree_2[out, 1])

    partial and the tree live in shared memory, each filled inside the next one's row loop (so the
    block's barriers fence them; the tree stops at two lanes: a one-thread loop would vanish in
    simplification, and with it the thread guard). With `consumer` (stage, its block-level loop),
    `stage` is inlined there: every thread of the consumer combines the last two lanes itself.
    Else `stage` is a kernel output: returns its row loop (bind it to blockIdx.x). Returns the new
    stages too, partial first."""
    body = stage.body
    if not isinstance(body, Reduce) or stage.relations or stage.annotations:
        raise ScheduleError(f"cross_thread_reduce: {stage.op.name} must be an unscheduled reduction")
    if threads < 4 or threads & (threads - 1):
        raise ScheduleError(f"cross_thread_reduce: {threads} threads is not a power of two >= 4")
    if not stage.op.axis:
        raise ScheduleError(f"cross_thread_reduce: {stage.op.name} is a scalar (rank 0); keep its axes (keepdims)")
    op = stage.op
    rows = tuple(op.shape)
    k_axes = body.axis
    length = 1
    for iv in k_axes:
        length *= iv.extent
    chunks = -(-length // threads)
    identity = body.init
    from ....te import tensor as te

    def partial_body(*idx):
        *r, t = idx
        j = te.reduce_axis(chunks, "j")
        flat = j.var * threads + t
        clamped = minimum(flat, const(length - 1, "int64")) if chunks * threads != length else flat
        point, stride = {}, length
        for pos, iv in enumerate(k_axes):  # flat position -> one index per reduce axis (row-major)
            stride //= iv.extent
            v = clamped // stride if stride > 1 else clamped
            point[iv.var] = v % iv.extent if pos > 0 else v
        point.update({ax.var: v for ax, v in zip(op.axis, r)})
        value = substitute(body.source, point)
        if chunks * threads != length:
            value = select(flat < length, value, identity)
        return Reduce(body.combiner, value, (j,), identity)

    partial = te.compute(rows + (threads,), partial_body, name=f"{op.name}.partial", tag="gpu_reduce_partial")
    sch.add_stage(Stage(partial.op, list(partial.op.axis) + list(partial.op.reduce_axis), scope="shared"),
                  before=stage)
    combine = lambda a, b: body.combine(a, b)  # noqa: E731
    levels = [partial]
    width = threads // 2
    while width >= 2:
        levels.append(_tree_stage(sch, levels[-1], rows, width, combine, f"{op.name}.tree{width}", stage))
        width //= 2
    last = levels[-1]
    at = tuple(ax.var for ax in op.axis)
    stage.body_override = combine(TensorRead(last, at + (IntImm(0),)), TensorRead(last, at + (IntImm(1),)))
    stage.leaf_iter_vars = list(op.axis)
    new_stages = [sch[t] for t in levels]
    # Each level is filled inside the next one's row loop; its thread loop spans its width.
    for level in new_stages:
        _bind_level(level, threads)
    for lower_level, upper in zip(new_stages[:-1], new_stages[1:]):
        lower_level.compute_at(upper, _row_loop(upper))
    if consumer is not None:
        stage.compute_inline()
        new_stages[-1].compute_at(*consumer)
        return None, new_stages
    row = stage.fuse(*op.axis) if len(op.axis) > 1 else op.axis[0]
    row_outer, row_inner = stage.split(row, 1)
    stage.bind(row_inner, "threadIdx.x")
    new_stages[-1].compute_at(stage, row_outer)
    return row_outer, new_stages


def _row_loop(stage: Stage) -> IterVar:
    """The leaf just outside the level's thread loop: its row loop, all rows fused."""
    thread = next(iv for iv, tag in stage.bindings.items() if tag == "threadIdx.x")
    pos = stage.leaf_iter_vars.index(thread)
    if pos == 0:
        raise ScheduleError(f"{stage.op.name}: no row loop outside the thread loop")
    return stage.leaf_iter_vars[pos - 1]


def _bind_level(stage: Stage, threads: int) -> None:
    *rows, t = stage.op.axis
    if len(rows) > 1:
        stage.fuse(*rows)
    stage.bind(t, "threadIdx.x")


def attach_reductions(sch: Schedule, stage: Stage, at: IterVar, target: Target, scope: str = "local") -> None:
    """Compute every materialized producer of `stage` inside loop `at`: one thread's own copy
    ("local", the loop is inside the thread loops) or the block's ("shared", cooperative when long)."""
    for producer in reduction_producers(sch, stage.op):
        if is_scheduled(producer):
            continue
        if producer.reduce_axis and scope == "shared" and producer.op.axis:
            _, parts = cross_thread_reduce(sch, producer, block_threads(reduce_length(producer), target), (stage, at))
            attach_reductions(sch, parts[0], _row_loop(parts[0]), target, "shared")
            continue
        producer.compute_at(stage, at)
        if not producer.reduce_axis:
            attach_reductions(sch, producer, producer.leaf_iter_vars[-1], target, scope)
            continue
        spatial = [iv for iv in producer.leaf_iter_vars if iv.kind != "reduce"]
        reduce = [iv for iv in producer.leaf_iter_vars if iv.kind == "reduce"]
        producer.reorder(*spatial, *reduce)
        attach_reductions(sch, producer, spatial[-1] if spatial else at, target, scope)


def one_thread_per_output(sch: Schedule, stage: Stage, target: Target, threads: Optional[int] = None) -> None:
    """Outputs spread over blocks x threads; each thread runs the whole reduction (and computes the
    reductions its output reads, in registers)."""
    spatial = [iv for iv in stage.leaf_iter_vars if iv.kind != "reduce"]
    reduce = [iv for iv in stage.leaf_iter_vars if iv.kind == "reduce"]
    if reduce:
        stage.reorder(*spatial, *reduce)
    count = output_count(stage)
    threads = threads or min(threads_of(target), max(32, 1 << max(0, (count - 1).bit_length())))
    bind_flat(stage, spatial, threads)
    thread_loop = next(iv for iv, tag in stage.bindings.items() if tag == "threadIdx.x")
    attach_reductions(sch, stage, thread_loop, target, "local")


def schedule_reduce_stage(sch: Schedule, stage: Stage, target: Target, threads: Optional[int] = None) -> None:
    """Cooperative (a block per output) when the reduction is long and outputs are few, else one
    thread per output."""
    # (At least two outputs: with one, the block loop has extent 1 and simplification drops it.)
    if (stage.reduce_axis and reduce_length(stage) >= COOPERATIVE_MIN and 2 <= output_count(stage)
            and output_count(stage) <= COOPERATIVE_MAX_OUTPUTS):
        row, parts = cross_thread_reduce(sch, stage, threads or block_threads(reduce_length(stage), target))
        stage.bind(row, "blockIdx.x")
        attach_reductions(sch, parts[0], _row_loop(parts[0]), target, "shared")
        return
    one_thread_per_output(sch, stage, target, threads)


def schedule_reduce(sch: Schedule, outs: Sequence[Tensor], target: Target) -> None:
    """The cuda fallback of reductions: each output stage as above; an elementwise output (a mean's
    division) runs one thread per element with the reduction it reads computed inline in registers,
    or cooperatively by its block when that reduction is long."""
    reject_extern(sch, target)
    for stage in output_stages(sch, outs):
        if is_scheduled(stage):
            continue
        inline_intermediates(sch, stage, outs)
        if stage.reduce_axis:
            schedule_reduce_stage(sch, stage, target)
            continue
        long = [p for p in reduction_producers(sch, stage.op) if p.reduce_axis and reduce_length(p) >= COOPERATIVE_MIN]
        if long and 2 <= output_count(stage) <= COOPERATIVE_MAX_OUTPUTS:
            # A block per output element: its long reduction is shared by the block's threads.
            row = stage.fuse(*stage.op.axis) if len(stage.op.axis) > 1 else stage.op.axis[0]
            outer, inner = stage.split(row, 1)
            stage.bind(outer, "blockIdx.x")
            stage.bind(inner, "threadIdx.x")
            attach_reductions(sch, stage, outer, target, "shared")
        else:
            one_thread_per_output(sch, stage, target)


__all__ = ["cross_thread_reduce", "attach_reductions", "one_thread_per_output", "schedule_reduce",
           "schedule_reduce_stage", "block_threads"]
