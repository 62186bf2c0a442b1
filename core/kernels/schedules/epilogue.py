"""Schedules the epilogue of a fused kernel: the elementwise stages after a conv, matmul or pool
anchor (bias, BN, ReLU/Clip, residual Add) that write the kernel's outputs. Where the epilogue
reads the anchor's reduction elementwise, it runs inside the reduction's tile loop, right after
the tile is finished (reverse_compute_at), so the tile is still in registers or L1."""
from __future__ import annotations

from typing import Callable, Optional, Sequence

from ...target import Target
from ...te.schedule import PointMap, Schedule, Stage, reads_at_own_axes
from ...te.tensor import ComputeOp, PlaceholderOp, Tensor
from ..conv2d import flat_point_map
from ..integer import conv_point_map
from .generic import injective_stage


def reduction_feeding(sch: Schedule, op: ComputeOp) -> Optional[Stage]:
    """The one materialized reduction stage `op` reads through inlined stages, if there is one."""
    found: list[Stage] = []
    seen: set[int] = set()

    def visit(o: ComputeOp) -> None:
        for t in o.input_tensors:
            if isinstance(t.op, PlaceholderOp) or id(t.op) in seen:
                continue
            seen.add(id(t.op))
            stage = sch[t]
            if stage.inlined:
                visit(t.op)
            elif t.op.reduce_axis:
                found.append(stage)

    visit(op)
    return found[0] if len(found) == 1 else None


def attach_point(producer: Stage):
    """The producer's innermost leaf outside its reduce loops (None when a reduce loop is outermost)."""
    leaves = producer.leaf_iter_vars
    first_reduce = next((k for k, iv in enumerate(leaves) if iv.kind == "reduce"), len(leaves))
    return leaves[first_reduce - 1] if first_reduce > 0 else None


# Producer tag -> the point map of a producer stage computed in another layout than its consumers
# read (None: the consumers read it at their own axes).
_POINT_MAPS: dict[str, Callable[[ComputeOp], Optional[PointMap]]] = {"conv2d": flat_point_map,
                                                                    "int8_dot": conv_point_map}


def schedule_epilogue(sch: Schedule, outs: Sequence[Tensor], target: Target) -> None:
    """A single epilogue output that reads the anchor's reduction elementwise is attached to the
    reduction's tile; other epilogue outputs get the injective schedule (one pass over memory)."""
    stages = [sch[t] for t in outs if isinstance(t.op, ComputeOp)]
    stages = [s for s in stages if not (s.inlined or s.annotations or s.attach is not None)]
    if len(stages) == 1:
        producer = reduction_feeding(sch, stages[0].op)
        # The producer must still reduce (a cache_write moves its reduction to an accumulator stage);
        # stages computed at its outer loops (a depthwise conv's padded rows) leave its tile loop free.
        reduces = producer is not None and any(iv.kind == "reduce" for iv in producer.leaf_iter_vars)
        at = attach_point(producer) if reduces else None
        if reduces and not any(s.attach is not None and s.attach[0] is producer and s.attach[1] is at
                               for s in sch.stages):
            maps = _POINT_MAPS.get(producer.op.tag)
            point_map = maps(producer.op) if maps is not None else None
            if at is not None and (point_map is not None or _fits(sch, stages[0].op, producer.op)):
                stages[0].reverse_compute_at(producer, at, point_map)
                return
    for stage in stages:
        injective_stage(stage, target)


def _fits(sch: Schedule, consumer: ComputeOp, producer: ComputeOp) -> bool:
    return (len(consumer.axis) == len(producer.axis)
            and all(c.extent <= p.extent for c, p in zip(consumer.axis, producer.axis))
            and reads_at_own_axes(sch, consumer, producer))
