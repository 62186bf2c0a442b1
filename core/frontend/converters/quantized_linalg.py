"""Integer and quantized matmul/conv (MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv) as float64
MatMul/Conv on zero-point-shifted inputs: every int8/uint8 product sum that fits int32 is exact in float64,
so the integer results match ONNX's int32 accumulation bit for bit."""
from __future__ import annotations

import numpy as np

from .registry import ConvertContext, converter
from .windows import as_2d, lift_1d, lower_1d, resolve_window, spatial_rank

_ACC = "float64"  # the accumulator: exact for int32-range sums of 8-bit products
_QUANT_RANGES = {"int8": (-128, 127), "uint8": (0, 255)}


def _shifted(ctx: ConvertContext, index: int, zero_index: int | None, channel_axis: int | None = None) -> str:
    """Input `index` as float64 minus its zero point (a scalar, or one per `channel_axis` entry)."""
    value = ctx.emit1("Cast", [ctx.input(index)], to=_ACC)
    if zero_index is None or not ctx.has_input(zero_index):
        return value
    zero, shape = ctx.input(zero_index), ctx.shape(index)
    size = int(np.prod(ctx.shape(zero_index), dtype=np.int64))
    if size == 1:
        zero = ctx.reshape(zero, ())
    elif channel_axis is not None and size == shape[channel_axis] and len(ctx.shape(zero_index)) == 1:
        zero = ctx.reshape(zero, tuple(size if d == channel_axis else 1 for d in range(len(shape))))
    else:
        ctx.unsupported(f"zero point of shape {list(ctx.shape(zero_index))} for input {index} "
                        "(per tensor, or per output channel of the weights, is compiled)")
    return ctx.emit1("Sub", [value, ctx.emit1("Cast", [zero], to=_ACC)])


def _conv(ctx: ConvertContext, x: str, w: str) -> str:
    """ONNX Conv attributes (pads, auto_pad, strides, dilations, group) applied to float64 x and w."""
    spatial = spatial_rank(ctx, "convolution")
    kernel = ctx.builder.type_of(w).shape[2:]
    if len(kernel) != spatial:
        ctx.fail(f"weights {ctx.builder.type_of(w)} do not match a {spatial}-D convolution")
    window = resolve_window(ctx, ctx.shape(0)[2:], kernel)
    _, strides, dilations, pads = as_2d(window)
    inputs = [lift_1d(ctx, x), lift_1d(ctx, w)] if spatial == 1 else [x, w]
    y = ctx.emit1("Conv", inputs, strides=strides, pads=pads, dilations=dilations, group=int(ctx.attr("group", 1)))
    return lower_1d(ctx, y) if spatial == 1 else y


def _requantize(ctx: ConvertContext, acc: str, scales: tuple[int, int, int], zero_index: int,
                channel_scale_shape: tuple[int, ...] | None = None) -> str:
    """round(acc * (s_a * s_b / s_y)) + y_zero_point, saturated to y's 8-bit type (ONNX's QLinear* math:
    the multiplier in the scales' own dtype, the product in float64)."""
    a_scale, b_scale, y_scale = (ctx.input(i) for i in scales)
    for i in scales:
        size = int(np.prod(ctx.shape(i), dtype=np.int64))
        if size != 1 and not (channel_scale_shape and i == scales[1]):
            ctx.unsupported(f"scale input {i} of shape {list(ctx.shape(i))} (per tensor scales are compiled)")
    a_scale, y_scale = ctx.reshape(a_scale, ()), ctx.reshape(y_scale, ())
    if channel_scale_shape and int(np.prod(ctx.shape(scales[1]), dtype=np.int64)) != 1:
        b_scale = ctx.reshape(b_scale, channel_scale_shape)
    else:
        b_scale = ctx.reshape(b_scale, ())
    multiplier = ctx.emit1("Div", [ctx.emit1("Mul", [a_scale, b_scale]), y_scale])
    value = ctx.emit1("Round", [ctx.emit1("Mul", [acc, ctx.emit1("Cast", [multiplier], to=_ACC)])])
    dtype = ctx.type_of(zero_index).dtype if ctx.has_input(zero_index) else ctx.type_of(0).dtype
    if dtype not in _QUANT_RANGES:
        ctx.unsupported(f"{ctx.op_type} producing {dtype} (int8 and uint8 are compiled)")
    if ctx.has_input(zero_index):
        value = ctx.emit1("Add", [value, ctx.emit1("Cast", [ctx.reshape(ctx.input(zero_index), ())], to=_ACC)])
    lo, hi = _QUANT_RANGES[dtype]
    return ctx.emit1("Cast", [ctx.emit1("Clip", [value], min=float(lo), max=float(hi))], to=dtype)


@converter("MatMulInteger", since_version=10)
def matmul_integer(ctx: ConvertContext) -> str:
    # a's zero point may be per row (axis -2 of a), b's per column (last axis of b).
    a = _shifted(ctx, 0, 2, channel_axis=len(ctx.shape(0)) - 2 if len(ctx.shape(0)) >= 2 else None)
    b = _shifted(ctx, 1, 3, channel_axis=len(ctx.shape(1)) - 1)
    return ctx.emit1("Cast", [ctx.emit1("MatMul", [a, b])], to="int32")


@converter("ConvInteger", since_version=10)
def conv_integer(ctx: ConvertContext) -> str:
    x, w = _shifted(ctx, 0, 2), _shifted(ctx, 1, 3, channel_axis=0)
    return ctx.emit1("Cast", [_conv(ctx, x, w)], to="int32")


@converter("QLinearMatMul", since_version=10)
def qlinear_matmul(ctx: ConvertContext) -> str:
    a, b = _shifted(ctx, 0, 2), _shifted(ctx, 3, 5)
    return _requantize(ctx, ctx.emit1("MatMul", [a, b]), (1, 4, 6), 7)


@converter("QLinearConv", since_version=10)
def qlinear_conv(ctx: ConvertContext) -> str:
    x, w = _shifted(ctx, 0, 2), _shifted(ctx, 3, 5, channel_axis=0)
    acc = _conv(ctx, x, w)
    if ctx.has_input(8):  # int32 bias, added to the integer accumulator per output channel
        channels = ctx.shape(8)[0]
        bias = ctx.reshape(ctx.emit1("Cast", [ctx.input(8)], to=_ACC), (1, channels) + (1,) * (len(ctx.shape(0)) - 2))
        acc = ctx.emit1("Add", [acc, bias])
    per_channel = (1, ctx.shape(3)[0]) + (1,) * (len(ctx.shape(0)) - 2)
    return _requantize(ctx, acc, (1, 4, 6), 7, channel_scale_shape=per_channel)
