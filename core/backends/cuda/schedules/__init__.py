"""cuda schedules (and the computes shaped for them): registers each op family's GPU schedule with
`register_schedule(op, CUDA_KIND)`; the generic GPU fallbacks (injective, reduction, epilogue)
are the CudaBackend's."""
from __future__ import annotations

from ....target import CUDA_KIND
from ....kernels.registry import register_schedule
from .conv2d import schedule_conv2d
from .dense import schedule_matmul
from .integer import schedule_conv_integer, schedule_matmul_integer
from .norm import schedule_row_ops
from .reduce import schedule_reduce

_SCHEDULES = {
    schedule_conv2d: ("Conv",),
    schedule_matmul: ("MatMul",),
    schedule_matmul_integer: ("MatMulIntegerPacked",),
    schedule_conv_integer: ("ConvIntegerPacked",),
    schedule_row_ops: ("Softmax", "LogSoftmax", "LayerNormalization"),
    schedule_reduce: ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "ReduceSum", "ReduceMean",
                      "ReduceMax", "ReduceMin", "ReduceProd"),
}
for _schedule, _ops in _SCHEDULES.items():
    for _op in _ops:
        register_schedule(_op, CUDA_KIND)(_schedule)
