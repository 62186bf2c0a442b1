"""Shared helpers of the GPU schedules: binding loops to the launch grid, stage discovery, and the
checks every cuda schedule makes first (no hand-written extern stages)."""
from __future__ import annotations

from typing import Sequence

from ....errors import ScheduleError
from ....target import Target
from ....te.schedule import Schedule, Stage
from ....te.tensor import ComputeOp, ExternOp, IterVar, PlaceholderOp, Tensor

DEFAULT_THREADS = 256  # threads per block of elementwise kernels: 8 warps, enough to hide memory latency
MAX_GRID_X = 2**31 - 1


class UnsupportedOnGPUError(ScheduleError):
    """A kernel uses something the cuda schedules cannot place on a GPU yet."""

    code = "unsupported_on_gpu"


def reject_extern(sch: Schedule, target: Target) -> None:
    """Extern stages are loop programs written for one CPU thread (scans, TopK, NMS): lowered as they
    are, every GPU thread would run the whole loop and race on the output."""
    for stage in sch.stages:
        if isinstance(stage.op, ExternOp):
            raise UnsupportedOnGPUError(f"{stage.op.name} is a hand-written sequential stage (extern), which is not "
                                        f"supported on {target.name} yet")


def threads_of(target: Target, wanted: int = DEFAULT_THREADS) -> int:
    return max(1, min(wanted, target.max_threads_per_block or wanted))


def bind_flat(stage: Stage, axes: Sequence[IterVar], threads: int) -> IterVar:
    """Fuse `axes` (adjacent leaves, outermost first), one element per thread: blockIdx.x x threadIdx.x.
    More blocks than the grid allows are walked by a serial loop around the grid (grid-stride)."""
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    bo, ti = stage.split(fused, threads)
    if bo.extent > MAX_GRID_X:
        outer, bo = stage.split(bo, MAX_GRID_X)
    stage.bind(bo, "blockIdx.x")
    stage.bind(ti, "threadIdx.x")
    return bo


def thread_tiles(out: Stage, tiles: Sequence[tuple[IterVar, int, int]], outer: Sequence[IterVar] = ()) -> tuple:
    """Split each of `out`'s axes, given as (axis, threads, registers), into block, thread and register loops;
    order them blocks, threads, registers after `outer`; bind the threads (the last axis to threadIdx.x, then y,
    z) and unroll the registers. Returns (block loops, thread loops) for the caller to bind the blocks."""
    if len(tiles) > 3:
        raise ValueError(f"a block has at most 3 thread dimensions, got {len(tiles)} tiles")
    blocks, threads, registers = [], [], []
    for axis, thread_count, regs in tiles:
        block, inner = out.split(axis, thread_count * regs)
        thread, reg = out.split(inner, regs)
        blocks.append(block)
        threads.append(thread)
        registers.append(reg)
    out.reorder(*outer, *blocks, *threads, *registers)
    for thread, tag in zip(threads, ("threadIdx.z", "threadIdx.y", "threadIdx.x")[3 - len(threads):]):
        out.bind(thread, tag)
    for reg in registers:
        out.unroll(reg)
    return blocks, threads


def reduction_producers(sch: Schedule, op: ComputeOp) -> list[Stage]:
    """The materialized (not inlined) compute stages `op` reads, directly or through inlined stages."""
    found: list[Stage] = []
    seen: set[int] = set()

    def visit(o: ComputeOp, body) -> None:
        from ....tir.functor import walk_expr
        from ....te.tensor import TensorRead

        for e in walk_expr(body):
            if not isinstance(e, TensorRead) or isinstance(e.tensor.op, PlaceholderOp) or id(e.tensor.op) in seen:
                continue
            seen.add(id(e.tensor.op))
            stage = sch[e.tensor]
            if stage.inlined:
                visit(e.tensor.op, stage.body)
            else:
                found.append(stage)

    visit(op, sch[Tensor(op)].body)
    return found


def inline_intermediates(sch: Schedule, stage: Stage, outs: Sequence[Tensor] = (), keep_tags: Sequence[str] = ()) -> None:
    """Inline every elementwise stage `stage` depends on that nobody scheduled (an op's own
    intermediates: pads, window phases), through reductions too: a second root stage would need a
    grid-wide barrier, and inlined, each thread reads the input it needs directly."""
    keep = {id(t.op) for t in outs}
    seen: set[int] = set()
    todo = [stage]
    while todo:
        current = todo.pop()
        for producer in reduction_producers(sch, current.op):
            if id(producer.op) in seen:
                continue
            seen.add(id(producer.op))
            if (not is_scheduled(producer) and not producer.reduce_axis and id(producer.op) not in keep
                    and producer.op.tag not in keep_tags):  # (a stage its schedule copies first, then inlines)
                producer.compute_inline()
                todo.append(current)  # its own producers are now read through it
            else:
                todo.append(producer)


def output_stages(sch: Schedule, outs: Sequence[Tensor]) -> list[Stage]:
    return [sch[t] for t in outs if isinstance(t.op, ComputeOp)]


def is_scheduled(stage: Stage) -> bool:
    return bool(stage.inlined or stage.bindings or stage.attach is not None)


def cooperative_fetch(stage: Stage, threads: Sequence[tuple[str, int]]) -> None:
    """All of the block's threads copy the stage's region: its axes fused (the innermost one is
    contiguous in memory), split by the block's thread extents, innermost threadIdx.x; `threads`
    (tag, extent) are exactly the consumer's so no thread loop is shorter than the block."""
    fused = stage.fuse(*stage.op.axis) if len(stage.op.axis) > 1 else stage.op.axis[0]
    rest = fused
    for tag, extent in reversed(threads):  # x first (innermost), then y, z
        rest, inner = stage.split(rest, extent)
        stage.bind(inner, tag)
