"""Integer and quantized matmul/conv: MatMulInteger and ConvInteger become their integer graph ops; QLinearMatMul
and QLinearConv become the same ops plus Requantize, or, with parameters those cannot take (non-constant or
per-row), float64 MatMul/Conv on zero-point-shifted inputs (exact for int32 sums of 8-bit products)."""
from __future__ import annotations

import numpy as np

from .linalg import matmul
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


def _conv(ctx: ConvertContext, x: str, w: str, op: str = "Conv", extra_inputs: tuple[str, ...] = ()) -> str:
    """ONNX Conv attributes (pads, auto_pad, strides, dilations, group) applied to x and w (then
    `extra_inputs`) by graph op `op`: Conv on float64 operands, or ConvInteger with its zero points."""
    spatial = spatial_rank(ctx, "convolution")
    kernel = ctx.builder.type_of(w).shape[2:]
    if len(kernel) != spatial:
        ctx.fail(f"weights {ctx.builder.type_of(w)} do not match a {spatial}-D convolution")
    window = resolve_window(ctx, ctx.shape(0)[2:], kernel)
    _, strides, dilations, pads = as_2d(window)
    inputs = [lift_1d(ctx, x), lift_1d(ctx, w)] if spatial == 1 else [x, w]
    y = ctx.emit1(op, inputs + list(extra_inputs), strides=strides, pads=pads, dilations=dilations,
                  group=int(ctx.attr("group", 1)))
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


def _integer_zero_points(ctx: ConvertContext, channel_axis: int) -> tuple[str, ...]:
    """MatMulInteger's and ConvInteger's zero points as their graph op takes them: input 0's a scalar
    (a zero of its dtype when only input 1's is given), input 1's a scalar or one per `channel_axis` entry."""
    zeros: list[str] = []
    for index, data, per_axis in ((2, 0, None), (3, 1, channel_axis)):
        if not ctx.has_input(index):
            zeros.append(ctx.const(np.zeros((), ctx.type_of(data).dtype)))
            continue
        size = int(np.prod(ctx.shape(index), dtype=np.int64))
        if size == 1:
            zeros.append(ctx.reshape(ctx.input(index), ()))
        elif per_axis is not None and ctx.shape(index) == (ctx.shape(data)[per_axis],):
            zeros.append(ctx.input(index))
        else:
            ctx.unsupported(f"zero point of shape {list(ctx.shape(index))} for input {data} (per tensor, "
                            "or per output channel of the weights, is compiled)")
    return tuple(zeros) if ctx.has_input(3) else tuple(zeros[:1]) if ctx.has_input(2) else ()


@converter("MatMulInteger", since_version=10)
def matmul_integer(ctx: ConvertContext) -> str:
    return matmul(ctx, ctx.input(0), ctx.input(1), "MatMulInteger", _integer_zero_points(ctx, -1))


@converter("ConvInteger", since_version=10)
def conv_integer(ctx: ConvertContext) -> str:
    return _conv(ctx, ctx.input(0), ctx.input(1), "ConvInteger", _integer_zero_points(ctx, 0))


def _output_zero_point(ctx: ConvertContext, channels: int) -> np.ndarray | None:
    """A QLinear* node's constant 8-bit output zero point when the node can run as an integer op and Requantize:
    float32 scales, per tensor except input 1's (or one per output channel), per-tensor zero points of the data
    and of the output. None: the float64 form is used instead."""
    zero = ctx.builder.constant_value(ctx.input(7)) if ctx.has_input(7) else np.zeros((), "uint8")
    sizes = [int(np.prod(ctx.shape(i), dtype=np.int64)) for i in (1, 2, 4, 5, 6)]
    if zero is None or zero.size != 1 or zero.dtype.name not in _QUANT_RANGES \
            or any(ctx.type_of(i).dtype != "float32" for i in (1, 4, 6)) \
            or sizes[0] != 1 or sizes[1] != 1 or sizes[4] != 1 or sizes[2] not in (1, channels) \
            or sizes[3] not in (1, channels) or len(ctx.shape(4)) > 1 or len(ctx.shape(5)) > 1:
        return None
    return zero.reshape(())


def _integer_requantize(ctx: ConvertContext, acc: str, zero: np.ndarray, channel_shape: tuple[int, ...]) -> str:
    """Requantize of a QLinear* node's int32 accumulator: multiplier (s_a * s_b) / s_y in float32, as ONNX
    Runtime computes it."""
    b_scale = ctx.input(4)
    b_scale = ctx.reshape(b_scale, channel_shape if int(np.prod(ctx.shape(4))) != 1 else ())
    product = ctx.emit1("Mul", [ctx.reshape(ctx.input(1), ()), b_scale])
    multiplier = ctx.emit1("Div", [product, ctx.reshape(ctx.input(6), ())])
    lo, hi = _QUANT_RANGES[zero.dtype.name]
    return ctx.emit1("Requantize", [acc, multiplier], to=zero.dtype.name, zero_point=int(zero), min=lo, max=hi)


def _qlinear_zero_points(ctx: ConvertContext) -> tuple[str, str]:
    """A QLinear* node's data and weight zero points (inputs 2 and 5) as the integer graph ops take them (the
    weights' per tensor or, as checked by _output_zero_point, one per output channel)."""
    weight_zero = ctx.input(5)
    if int(np.prod(ctx.shape(5), dtype=np.int64)) == 1:
        weight_zero = ctx.reshape(weight_zero, ())
    return ctx.reshape(ctx.input(2), ()), weight_zero


@converter("QLinearMatMul", since_version=10)
def qlinear_matmul(ctx: ConvertContext) -> str:
    columns = ctx.shape(3)[-1]
    zero = _output_zero_point(ctx, columns) if len(ctx.shape(3)) >= 2 else None
    if zero is not None:
        acc = matmul(ctx, ctx.input(0), ctx.input(3), "MatMulInteger", _qlinear_zero_points(ctx))
        return _integer_requantize(ctx, acc, zero, (columns,))
    a, b = _shifted(ctx, 0, 2), _shifted(ctx, 3, 5)
    return _requantize(ctx, ctx.emit1("MatMul", [a, b]), (1, 4, 6), 7)


@converter("QLinearConv", since_version=10)
def qlinear_conv(ctx: ConvertContext) -> str:
    per_channel = (ctx.shape(3)[0],) + (1,) * (len(ctx.shape(0)) - 2)
    zero = _output_zero_point(ctx, ctx.shape(3)[0])
    if zero is not None:
        acc = _conv(ctx, ctx.input(0), ctx.input(3), "ConvInteger", _qlinear_zero_points(ctx))
        if ctx.has_input(8):  # int32 bias, added to the integer accumulator per output channel
            acc = ctx.emit1("Add", [acc, ctx.reshape(ctx.input(8), per_channel)])
        return _integer_requantize(ctx, acc, zero, per_channel)
    x, w = _shifted(ctx, 0, 2), _shifted(ctx, 3, 5, channel_axis=0)
    acc = _conv(ctx, x, w)
    if ctx.has_input(8):
        acc = ctx.emit1("Add", [acc, ctx.reshape(ctx.emit1("Cast", [ctx.input(8)], to=_ACC), (1,) + per_channel)])
    return _requantize(ctx, acc, (1, 4, 6), 7, channel_scale_shape=(1,) + per_channel)
