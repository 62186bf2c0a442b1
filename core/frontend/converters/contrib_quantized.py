"""ONNX Runtime's com.microsoft quantized ops (QOperator form: QGemm, QLinearAdd, QLinearMul, QLinearConcat,
QLinearSigmoid, QLinearLeakyRelu, QLinearAveragePool, QLinearGlobalAveragePool) as DequantizeLinear -> float op
-> QuantizeLinear, the QDQ form: the integer rewrite (graph/passes/integer_qdq.py) turns QGemm into
MatMulInteger + Requantize, and the elementwise ones fuse into one kernel on 8-bit data. DynamicQuantizeLSTM
(quantize_dynamic's LSTM) is an LSTM whose two products quantize their float operand at run time
(DynamicQuantizeLinear + MatMulInteger, as ONNX Runtime's kernel does)."""
from __future__ import annotations

import dataclasses

import numpy as np

from .contrib import MS
from .linalg import gemm
from .pool import average_pool, global_average_pool
from .quantize import dynamic_quantize_linear
from .recurrent import Products, convert_lstm, direction_slice
from .registry import ConvertContext, converter


def _scalar_or_axis(ctx: ConvertContext, index: int, length: int, what: str) -> tuple[str, bool]:
    """Input `index` (a scale or zero point) as shape () or, per axis, (length,): (value, is per axis)."""
    shape = ctx.shape(index)
    size = int(np.prod(shape, dtype=np.int64))
    if size == 1 and len(shape) <= 1:
        return ctx.reshape(ctx.input(index), ()), False
    if shape == (length,):
        return ctx.input(index), True
    ctx.unsupported(f"{what} of shape {list(shape)} (per tensor, or per output channel, is compiled)")


def dequantized(ctx: ConvertContext, index: int, axis: int = 0) -> str:
    """Input `index` dequantized by its scale and zero point (inputs index+1 and index+2, the zero point optional)."""
    x = ctx.type_of(index)
    length = x.shape[axis] if x.rank else 1
    scale, per_axis = _scalar_or_axis(ctx, index + 1, length, "scale")
    operands = [ctx.input(index), scale]
    if ctx.has_input(index + 2):
        zero, zero_per_axis = _scalar_or_axis(ctx, index + 2, length, "zero point")
        if zero_per_axis and not per_axis:
            ctx.unsupported("a per-channel zero point with a per-tensor scale")
        if per_axis and not zero_per_axis:  # the graph op takes the zero point in the scale's shape
            zero = ctx.emit1("Expand", [zero], shape=(length,))
        operands.append(zero)
    # Never folded at import, so that constant weights reach the integer rewrite as integers.
    return ctx.builder.add_node("DequantizeLinear", operands, 1, name_hint=ctx.hint, foldable=False,
                                axis=axis if per_axis else 0)[0]


def quantized(ctx: ConvertContext, value: str, scale_index: int, zero_index: int, dtype: str) -> str:
    """QuantizeLinear of float `value` by per-tensor inputs `scale_index` and `zero_index` (absent: a zero of
    `dtype`)."""
    scale, _ = _scalar_or_axis(ctx, scale_index, 1, "output scale")
    if ctx.has_input(zero_index):
        zero, _ = _scalar_or_axis(ctx, zero_index, 1, "output zero point")
    else:
        zero = ctx.const(np.zeros((), dtype))
    return ctx.emit1("QuantizeLinear", [value, scale, zero], axis=0)


def _with_inputs(ctx: ConvertContext, inputs: list[str]) -> ConvertContext:
    """The same node seen with other (float) inputs, for reusing a float op's converter."""
    return dataclasses.replace(ctx, inputs=inputs)


def _binary(ctx: ConvertContext, op: str) -> str:
    y = ctx.emit1(op, [dequantized(ctx, 0), dequantized(ctx, 3)])
    return quantized(ctx, y, 6, 7, ctx.type_of(0).dtype)


@converter("QLinearAdd", since_version=1, domain=MS)
def qlinear_add(ctx: ConvertContext) -> str:
    return _binary(ctx, "Add")


@converter("QLinearMul", since_version=1, domain=MS)
def qlinear_mul(ctx: ConvertContext) -> str:
    return _binary(ctx, "Mul")


@converter("QLinearSigmoid", since_version=1, domain=MS)
def qlinear_sigmoid(ctx: ConvertContext) -> str:
    return quantized(ctx, ctx.emit1("Sigmoid", [dequantized(ctx, 0)]), 3, 4, ctx.type_of(0).dtype)


@converter("QLinearLeakyRelu", since_version=1, domain=MS)
def qlinear_leaky_relu(ctx: ConvertContext) -> str:
    y = ctx.emit1("LeakyRelu", [dequantized(ctx, 0)], alpha=float(ctx.attr("alpha", 0.01)))
    return quantized(ctx, y, 3, 4, ctx.type_of(0).dtype)


def _channels_first(ctx: ConvertContext, x: str, to_first: bool) -> str:
    rank = ctx.builder.type_of(x).rank
    perm = (0, rank - 1) + tuple(range(1, rank - 1)) if to_first else (0,) + tuple(range(2, rank)) + (1,)
    return ctx.emit1("Transpose", [x], perm=perm)


def _pooled(ctx: ConvertContext, pool) -> str:
    """A quantized pool: dequantize, `pool` (the float converter) in NCHW order, quantize."""
    channels_last = bool(ctx.attr("channels_last", 0))
    x = dequantized(ctx, 0)
    if channels_last:
        x = _channels_first(ctx, x, True)
    y = pool(_with_inputs(ctx, [x]))
    if channels_last:
        y = _channels_first(ctx, y, False)
    return quantized(ctx, y, 3, 4, ctx.type_of(0).dtype)


@converter("QLinearAveragePool", since_version=1, domain=MS)
def qlinear_average_pool(ctx: ConvertContext) -> str:
    return _pooled(ctx, average_pool)


@converter("QLinearGlobalAveragePool", since_version=1, domain=MS)
def qlinear_global_average_pool(ctx: ConvertContext) -> str:
    return _pooled(ctx, global_average_pool)


@converter("QLinearConcat", since_version=1, domain=MS)
def qlinear_concat(ctx: ConvertContext) -> str:
    """Inputs: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per concatenated tensor."""
    parts = [dequantized(ctx, i) for i in range(2, len(ctx.inputs), 3)]
    rank = ctx.builder.type_of(parts[0]).rank
    y = ctx.emit1("Concat", parts, axis=ctx.axis(int(ctx.attr("axis")), rank))
    return quantized(ctx, y, 0, 1, ctx.type_of(2).dtype)


@converter("QGemm", since_version=1, domain=MS)
def qgemm(ctx: ConvertContext) -> str:
    """Inputs A, a_scale, a_zero_point, B, b_scale, b_zero_point, C (int32 bias, unit a_scale*b_scale),
    y_scale, y_zero_point; without y_scale the output is float."""
    columns_axis = 0 if ctx.attr("transB", 0) else 1
    a, b = dequantized(ctx, 0), dequantized(ctx, 3, axis=columns_axis)
    inputs = [a, b]
    if ctx.has_input(6):
        a_scale, _ = _scalar_or_axis(ctx, 1, 1, "scale")
        b_scale, _ = _scalar_or_axis(ctx, 4, ctx.shape(3)[columns_axis], "scale")
        bias_scale = ctx.emit1("Mul", [a_scale, b_scale])  # per tensor, or per column: axis 0 of a [N] bias
        inputs.append(ctx.builder.add_node("DequantizeLinear", [ctx.input(6), bias_scale], 1, name_hint=ctx.hint,
                                           foldable=False, axis=0)[0])
    y = gemm(_with_inputs(ctx, inputs))
    if not ctx.has_input(7):
        return y
    return quantized(ctx, y, 7, 8, ctx.type_of(0).dtype)


def _dynamic_product(ctx: ConvertContext, x: str, weights: str, scale: str, zero: str) -> str:
    """x [rows, K] float times 8-bit weights [K, N]: x quantized to uint8 over its whole range (DynamicQuantizeLinear),
    the int32 product (MatMulInteger, weights' zero point per tensor or per column), scaled back by x's scale times
    the weights' (one value, or one per column)."""
    xq, x_scale, x_zero = dynamic_quantize_linear(_with_inputs(ctx, [x]))
    product = ctx.emit1("MatMulInteger", [xq, weights, x_zero, zero])
    return ctx.emit1("Mul", [ctx.emit1("Cast", [product], to="float32"), ctx.emit1("Mul", [x_scale, scale])])


@converter("DynamicQuantizeLSTM", since_version=1, domain=MS)
def dynamic_quantize_lstm(ctx: ConvertContext) -> list:
    """LSTM's inputs 0-7, with W [D, I, 4H] and R [D, H, 4H] 8-bit and already transposed, then W_scale,
    W_zero_point, R_scale, R_zero_point, each [D] (per tensor) or [D, 4H] (per column). The input projection
    quantizes every step's x at once, the recurrent product each step's h (ONNX Runtime's at one thread, or a
    batch of one)."""
    for index, what in ((1, "W"), (2, "R")):
        if ctx.type_of(index).dtype not in ("int8", "uint8") or ctx.type_of(index).rank != 3:
            ctx.fail(f"{what} must be 8-bit [directions, rows, 4 * hidden], got {ctx.type_of(index)}")
    for index in range(8, 12):
        if not ctx.has_input(index):
            ctx.fail("W_scale, W_zero_point, R_scale and R_zero_point are required")

    def per_direction(d: int) -> Products:
        w, r = (direction_slice(ctx, ctx.input(i), d) for i in (1, 2))
        w_scale, w_zero, r_scale, r_zero = (direction_slice(ctx, ctx.input(i), d) for i in range(8, 12))
        return Products(lambda x: _dynamic_product(ctx, x, w, w_scale, w_zero),
                        lambda h: _dynamic_product(ctx, h, r, r_scale, r_zero))

    return convert_lstm(ctx, per_direction)
