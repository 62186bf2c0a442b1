"""CPU schedules of pooling: windows reduced into a vectorized output row, threads over rows.

Loop order (n, c, oh) fused and parallel | kh, kw | ow vectorized: each window row is added (or
maxed) into the whole output row, which stays in L1; the padded input is a parallel copy.
"""
from __future__ import annotations

from typing import Sequence

from ...target import Target
from ...te.schedule import Schedule
from ...te.tensor import Tensor
from .generic import extent, output_stage, parallelize, reduce_stage, window_pad_stage, worth_parallel
from .util import find_ops


def schedule_pool(sch: Schedule, outs: Sequence[Tensor], target: Target) -> None:
    for op in find_ops(outs, ["pool_pad"]):
        window_pad_stage(sch[Tensor(op)], target)
    for op in find_ops(outs, ["pool", "pool_sum"]):
        stage = sch[Tensor(op)]
        if not op.reduce_axis:  # the average's division
            output_stage(sch, op, outs, target)
            continue
        n, c, oh, ow = op.axis
        rkh, rkw = op.reduce_axis
        stage.reorder(n, c, oh, rkh, rkw, ow)
        stage.vectorize(ow)
        if worth_parallel(extent(op.axis) * extent(op.reduce_axis), target):
            parallelize(stage, [n, c, oh], target)


def schedule_global_pool(sch: Schedule, outs: Sequence[Tensor], target: Target) -> None:
    for op in find_ops(outs, ["reduce"]):
        reduce_stage(sch[Tensor(op)], target)
    for op in find_ops(outs, ["pool"]):  # the average's division
        output_stage(sch, op, outs, target)
