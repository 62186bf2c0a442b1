"""Registers the CPU schedule of each op; ops not listed get the generic one of their fusion pattern."""
from __future__ import annotations

from ..broadcast import BINARY
from ..elementwise import UNARY
from ..registry import register_schedule
from .conv2d import schedule_conv2d
from .conv2d_winograd import schedule_conv2d_winograd
from .conv2d_nchwc import schedule_conv2d_nchwc, schedule_global_pool_nchwc, schedule_pool_nchwc
from .conv_nd import schedule_conv_nd, schedule_pool_nd
from .conv_nd_nchwc import schedule_conv_nd_nchwc, schedule_pool_nd_nchwc
from .generic import schedule_injective
from .matmul import schedule_matmul
from .norm import schedule_row_ops
from .pool import schedule_global_pool, schedule_pool

_INJECTIVE_OPS = tuple(UNARY) + tuple(BINARY) + ("Where", "Reshape", "Transpose", "Concat", "Slice", "Gather",
                                                 "GatherElements", "Expand", "Pad",
                                                 "LayoutTransform")
_SCHEDULES = {
    schedule_injective: _INJECTIVE_OPS,
    schedule_conv2d: ("Conv",),
    schedule_conv2d_nchwc: ("Conv2dNCHWc",),
    schedule_conv_nd: ("ConvND",),
    schedule_conv_nd_nchwc: ("ConvNDNCHWc",),
    schedule_pool_nd_nchwc: ("PoolNDNCHWc",),
    schedule_pool_nd: ("PoolND",),
    schedule_conv2d_winograd: ("Conv2dWinogradNCHWc",),
    schedule_pool_nchwc: ("MaxPoolNCHWc", "AveragePoolNCHWc"),
    schedule_global_pool_nchwc: ("GlobalAveragePoolNCHWc", "GlobalMaxPoolNCHWc"),
    schedule_matmul: ("MatMul",),
    schedule_pool: ("MaxPool", "AveragePool"),
    schedule_global_pool: ("GlobalAveragePool", "GlobalMaxPool"),
    schedule_row_ops: ("Softmax", "LogSoftmax", "LayerNormalization", "ReduceSum", "ReduceMean", "ReduceMax",
                       "ReduceMin", "ReduceProd"),
}
for _schedule, _ops in _SCHEDULES.items():
    for _op in _ops:
        register_schedule(_op)(_schedule)
