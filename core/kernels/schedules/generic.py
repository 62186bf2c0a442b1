"""Generic CPU schedules by fusion pattern: injective (vectorize inner, parallel outer) and reduction.

Parallel loops are used only when a stage does enough work: forking OpenMP threads costs a few
microseconds, more than small elementwise kernels take in total.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ...target import Target
from ...te.schedule import Schedule, Stage
from ...te.tensor import ComputeOp, IterVar, Tensor

PARALLEL_MIN_WORK = 32 * 1024  # scalar operations (elements x reduction length) before threads pay off


def extent(ivs: Sequence[IterVar]) -> int:
    out = 1
    for iv in ivs:
        out *= iv.extent
    return out


def vector_lanes(op: ComputeOp, target: Target) -> int:
    """Lanes of one vector register for the widest dtype the stage reads or writes."""
    widest = max([np.dtype(op.dtype).itemsize] + [np.dtype(t.dtype).itemsize for t in op.input_tensors])
    return target.lanes({1: "int8", 2: "int16", 4: "float32", 8: "float64"}[widest])


def worth_parallel(work: int, target: Target) -> bool:
    return target.num_cores > 1 and work >= PARALLEL_MIN_WORK


def parallelize(stage: Stage, outer: list[IterVar], target: Target) -> None:
    """Fuse `outer` (adjacent leaves, outermost first) into one loop and run it across threads."""
    if not outer or extent(outer) < 2:
        return
    fused = stage.fuse(*outer) if len(outer) > 1 else outer[0]
    stage.parallel(fused)


def reads_under_lane_mask(op: ComputeOp, axis: IterVar) -> bool:
    """Whether a select in `op` picks between tensor reads by a condition on `axis` (Pad, Concat on
    the last axis): vectorized, each lane's read runs under a mask, which measured slower than the
    scalar loop LLVM vectorizes itself."""
    from ...tir.functor import walk_expr
    from ...tir.expr import Select
    from ...te.tensor import TensorRead

    for e in walk_expr(op.body):
        if isinstance(e, Select) and any(v is axis.var for v in walk_expr(e.cond)):
            if any(isinstance(x, TensorRead) for arm in (e.true_value, e.false_value) for x in walk_expr(arm)):
                return True
    return False


def injective_stage(stage: Stage, target: Target, parallel: bool = True) -> None:
    """Innermost axis vectorized (split by the vector width when that divides), outer axes fused
    and parallel when the stage is large enough."""
    leaves = list(stage.leaf_iter_vars)
    if not leaves or any(iv.kind == "reduce" for iv in leaves):
        return
    numel = extent(leaves)
    lanes = vector_lanes(stage.op, target)
    last, rows = leaves[-1], leaves[:-1]
    chunks: list[IterVar] = []
    if last.extent <= 1 or last not in stage.op.axis or reads_under_lane_mask(stage.op, last):
        chunks = [last]
    elif last.extent > lanes and last.extent % lanes == 0:
        lo, li = stage.split(last, lanes)
        stage.vectorize(li)
        chunks = [lo]
    else:
        stage.vectorize(last)  # codegen runs it as natural-width chunks plus one shorter group
    if not (parallel and worth_parallel(numel, target)):
        return
    if not chunks and len(rows) > 1 and extent(rows[:-1]) >= 4 * target.num_cores:
        # The innermost axis is one vector (a blocked layout's lanes, or a short row): threads over the
        # outer rows, the last row a serial loop. Fusing it in too made every vector pay the fused
        # loop's index math: x86-64-v3, one kernel, 11 interleaved rounds: a blocked Concat of two
        # 64-channel 55x55 maps 76 -> 16 us (NCHW 15 us), a blocked Relu of 128 x 55 x 55 60 -> 14 us.
        parallelize(stage, rows[:-1], target)
        return
    # Prefer threads over the rows only (cheap index math); fold in the chunk loop when rows are few.
    parallelize(stage, rows if extent(rows) >= 4 * target.num_cores or not chunks else rows + chunks, target)


def window_pad_stage(stage: Stage, target: Target) -> None:
    """The padded input of a window op: threads over rows only. Its select reads under a per-lane
    mask, and codegen's masked vectors (odd lengths: 10, 58 lanes) measured slower than the scalar
    row loop that LLVM vectorizes itself (up to 15x for 7x7 depthwise inputs)."""
    leaves = list(stage.leaf_iter_vars)
    if worth_parallel(extent(leaves), target) and len(leaves) > 1:
        parallelize(stage, leaves[:-1], target)


def reduce_stage(stage: Stage, target: Target, parallel: bool = True) -> None:
    """Outer spatial axes (fused, parallel when large), then the reduce axes, then the spatial axes
    that stay contiguous in the input (recorded by the compute as `inner_spatial`), vectorized."""
    leaves = list(stage.leaf_iter_vars)
    reduce = [iv for iv in leaves if iv.kind == "reduce"]
    if not reduce:
        injective_stage(stage, target, parallel)
        return
    spatial = [iv for iv in leaves if iv.kind != "reduce"]
    k = min(int(stage.op.attrs.get("inner_spatial", 0)), len(spatial))
    outer, inner = spatial[: len(spatial) - k], spatial[len(spatial) - k:]
    inner = [iv for iv in inner if iv.extent > 1]
    outer = [iv for iv in spatial if iv not in inner]
    stage.reorder(*outer, *reduce, *inner)
    if inner:
        lanes = vector_lanes(stage.op, target)
        last = inner[-1]
        if last.extent >= lanes and last.extent % lanes == 0:
            _, li = stage.split(last, lanes)
            stage.vectorize(li)
    work = extent(spatial) * extent(reduce)
    if parallel and worth_parallel(work, target):
        parallelize(stage, outer, target)


def output_stage(sch: Schedule, op: ComputeOp, outs: Sequence[Tensor], target: Target) -> None:
    """An op's final elementwise stage: scheduled when it is a kernel output, else inlined into the
    fused consumer that reads it (which its owner schedules), saving a pass over memory."""
    if any(t.op is op for t in outs):
        injective_stage(sch[Tensor(op)], target)
    else:
        sch[Tensor(op)].compute_inline()


def _out_stages(sch: Schedule, outs: Sequence[Tensor]) -> list[Stage]:
    return [sch[t] for t in outs if isinstance(t.op, ComputeOp)]


def schedule_injective(sch: Schedule, outs: Sequence[Tensor], target: Target) -> None:
    for stage in _out_stages(sch, outs):
        injective_stage(stage, target)


def schedule_reduce(sch: Schedule, outs: Sequence[Tensor], target: Target) -> None:
    for stage in _out_stages(sch, outs):
        reduce_stage(stage, target)


# The CPU's generic (injective, reduction) schedules of ops without their own (CpuBackend.fallback_schedules; the
# CPU-only single-op harness and tuning templates pass them to get_schedule themselves).
CPU_GENERIC = (schedule_injective, schedule_reduce)
