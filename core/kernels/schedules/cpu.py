"""Registers the CPU schedule of each op (ops not listed use the generic pattern schedules)."""
from __future__ import annotations

from ..registry import register_schedule
from .conv2d import schedule_conv2d
from .matmul import schedule_matmul

register_schedule("Conv")(schedule_conv2d)
register_schedule("MatMul")(schedule_matmul)
from .pool import schedule_global_pool, schedule_pool

for _op in ("MaxPool", "AveragePool"):
    register_schedule(_op)(schedule_pool)
for _op in ("GlobalAveragePool", "GlobalMaxPool"):
    register_schedule(_op)(schedule_global_pool)
from .norm import schedule_row_ops

for _op in ("Softmax", "LogSoftmax", "LayerNormalization", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
            "ReduceProd"):
    register_schedule(_op)(schedule_row_ops)
