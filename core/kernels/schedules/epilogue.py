"""Schedules the epilogue of a fused kernel: the elementwise stages after a conv, matmul or
reduction anchor (bias, BN, ReLU/Clip, residual Add), which write the kernel's outputs."""
from __future__ import annotations

from typing import Sequence

from ...target import Target
from ...te.schedule import Schedule
from ...te.tensor import ComputeOp, Tensor
from .generic import injective_stage


def schedule_epilogue(sch: Schedule, outs: Sequence[Tensor], target: Target) -> None:
    """Each epilogue output stage the anchor's schedule left alone gets the injective schedule."""
    for t in outs:
        if not isinstance(t.op, ComputeOp):
            continue
        stage = sch[t]
        if stage.inlined or stage.annotations or stage.attach is not None:
            continue
        injective_stage(stage, target)
