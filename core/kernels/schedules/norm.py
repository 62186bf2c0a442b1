"""CPU schedules of the multi-stage row ops: Softmax/LogSoftmax, LayerNormalization, Reduce*.

Each stage gets the generic treatment (reductions: outer rows parallel when large, contiguous inner
axes vectorized; elementwise stages: vectorized rows), found through the tags its compute set.
"""
from __future__ import annotations

from typing import Sequence

from ...target import Target
from ...te.schedule import Schedule
from ...te.tensor import Tensor
from .generic import injective_stage, output_stage, reduce_stage
from .util import find_ops

_REDUCE_TAGS = ("reduce", "softmax_max", "softmax_sum", "layer_norm_sum", "layer_norm_sqsum")
_OUTPUT_TAGS = ("reduce_out", "softmax", "layer_norm")  # final stages: inlined into a fused consumer


def schedule_row_ops(sch: Schedule, outs: Sequence[Tensor], target: Target) -> None:
    for op in find_ops(outs, _REDUCE_TAGS):
        reduce_stage(sch[Tensor(op)], target)
    for op in find_ops(outs, ["softmax_exp"]):  # read twice (sum, normalize): always materialized
        injective_stage(sch[Tensor(op)], target)
    for op in find_ops(outs, _OUTPUT_TAGS):
        output_stage(sch, op, outs, target)
