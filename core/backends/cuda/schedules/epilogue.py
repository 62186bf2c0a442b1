"""The GPU epilogue of a fused kernel. The conv and matmul schedules already compute the epilogue
(bias, ReLU/Clip, residual Add) as their output stage, right where each thread's register tile is
written back; what is left here (a kernel output the anchor did not take) gets the injective
schedule."""
from __future__ import annotations

from typing import Sequence

from ....target import Target
from ....te.schedule import Schedule
from ....te.tensor import Tensor
from .injective import injective_stage
from .launch import is_scheduled, output_stages


def schedule_epilogue(sch: Schedule, outs: Sequence[Tensor], target: Target) -> None:
    for stage in output_stages(sch, outs):
        if not is_scheduled(stage):
            injective_stage(sch, stage, target, outs=outs)
