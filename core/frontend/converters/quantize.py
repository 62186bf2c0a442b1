"""Quantization ops: 8-bit QuantizeLinear/DequantizeLinear as graph ops (the integer rewrite matches them), the
other forms, DynamicQuantizeLinear and ONNX's saturating casts to float8 as elementwise ops that fuse."""
from __future__ import annotations

import numpy as np

from ...graph.op_defs._common import FLOAT8_DTYPES, QUANT_DTYPES, SUBBYTE_INT_DTYPES
from ...narrow_dtypes import int_range, max_finite
from ..onnx_values import numpy_dtype
from .registry import ConvertContext, converter

_INT_QUANT_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "uint16": (0, 65535),
                     **{name: int_range(name) for name in SUBBYTE_INT_DTYPES}}
_EIGHT_BIT = ("int8", "uint8", "int32")  # int32: a dequantized bias


def _is_float(dtype: str) -> bool:
    return np.issubdtype(np.dtype(dtype), np.floating) or dtype in FLOAT8_DTYPES or dtype == "bfloat16"


def cast_value(ctx: ConvertContext, value: str, dtype: str, saturate: bool = True, round_mode: str = "up") -> str:
    """ONNX Cast of `value` to `dtype`: plain conversion (round to nearest even, ml_dtypes' overflow), except
    that saturate=1 clamps finite and infinite values to a float8's largest finite value first."""
    src = ctx.builder.type_of(value).dtype
    if src == dtype:
        return value
    if dtype == "float8_e8m0fnu" and (round_mode != "up" or not saturate):
        # The generated conversion implements ONNX's default only.
        ctx.unsupported(f"Cast to FLOAT8E8M0 with round_mode={round_mode!r}, saturate={int(saturate)} "
                        "(only round_mode='up' with saturate=1 is compiled)")
    if dtype in FLOAT8_DTYPES and saturate:
        if not _is_float(src):
            value = ctx.emit1("Cast", [value], to="float32")
        limit = max_finite(dtype)
        value = ctx.emit1("Clip", [value], min=-limit, max=limit)  # NaN passes through Clip
    return ctx.emit1("Cast", [value], to=dtype)


def _broadcastable(ctx: ConvertContext, value: str, shape: tuple[int, ...], axis: int, block_size: int,
                   what: str) -> str:
    """A scale or zero point shaped to broadcast against x: per tensor, per `axis`, or per block of
    `block_size` along `axis` (each entry repeated block_size times, the last block cut to fit)."""
    vshape = ctx.builder.type_of(value).shape
    size = int(np.prod(vshape, dtype=np.int64))
    if len(vshape) == 0 or size == 1:
        return ctx.reshape(value, ())
    rank = len(shape)
    axis = ctx.axis(axis, rank)  # only per-axis and blocked scales need a valid axis (ONNX's default is 1)
    if not block_size:
        if len(vshape) != 1 or vshape[0] != shape[axis]:
            ctx.fail(f"{what} of shape {list(vshape)} is neither per tensor nor per axis {axis} of {list(shape)}")
        return ctx.reshape(value, tuple(shape[axis] if d == axis else 1 for d in range(rank)))
    blocks = -(-shape[axis] // block_size)
    if len(vshape) != rank or vshape[axis] != blocks or \
            any(vshape[d] != shape[d] for d in range(rank) if d != axis):
        ctx.fail(f"{what} of shape {list(vshape)} does not block {list(shape)} by {block_size} along axis {axis}")
    inserted = vshape[:axis + 1] + (1,) + vshape[axis + 1:]
    repeated = vshape[:axis + 1] + (block_size,) + vshape[axis + 1:]
    spread = ctx.emit1("Expand", [ctx.reshape(value, inserted)], shape=repeated)
    full = list(vshape)
    full[axis] = blocks * block_size
    value = ctx.reshape(spread, tuple(full))
    if full[axis] != shape[axis]:
        value = ctx.emit1("Slice", [value], starts=(0,) * rank, steps=(1,) * rank, sizes=tuple(shape))
    return value


def _output_dtype(ctx: ConvertContext, zero_point_index: int) -> str:
    declared = ctx.attr("output_dtype", 0)
    declared = numpy_dtype(declared, ctx.where) if declared else None
    if ctx.has_input(zero_point_index):
        dtype = ctx.type_of(zero_point_index).dtype
        if declared and declared != dtype:
            ctx.fail(f"output_dtype {declared} differs from the zero point's dtype {dtype}")
        return dtype
    return declared or "uint8"


def _per_axis(ctx: ConvertContext, index: int, rank: int, axis: int) -> tuple[str, int] | None:
    """Scale or zero point input `index` as the 8-bit graph ops take it: shape () per tensor, (C,) per `axis`
    (normalized), or None when it is neither."""
    shape = ctx.shape(index)
    if int(np.prod(shape, dtype=np.int64)) == 1 and len(shape) <= 1:
        return ctx.reshape(ctx.input(index), ()), 0
    if len(shape) == 1 and -rank <= axis < rank and shape[0] == ctx.shape(0)[axis % rank]:
        return ctx.input(index), axis % rank
    return None


def _eight_bit_operands(ctx: ConvertContext, dtype: str, float_type: str) -> tuple[list[str], int] | None:
    """(x, scale[, zero point]) and the axis for the 8-bit DequantizeLinear/QuantizeLinear graph ops (`dtype`:
    the integer side's, `float_type`: the float side's), or None when the node needs the general decomposition
    (blocked, 16-bit, float8, other precisions)."""
    rank = len(ctx.shape(0))
    if dtype not in _EIGHT_BIT or int(ctx.attr("block_size", 0)) or ctx.attr("precision", 0) \
            or ctx.type_of(1).dtype != "float32" or float_type != "float32":
        return None
    scale = _per_axis(ctx, 1, rank, int(ctx.attr("axis", 1)))
    if scale is None:
        return None
    operands, axis = [ctx.input(0), scale[0]], scale[1]
    if ctx.has_input(2):
        zero = _per_axis(ctx, 2, rank, int(ctx.attr("axis", 1)))
        if zero is None or ctx.builder.type_of(zero[0]).shape != ctx.builder.type_of(scale[0]).shape:
            return None
        operands.append(zero[0])
    return operands, axis


@converter("QuantizeLinear", since_version=10)
def quantize_linear(ctx: ConvertContext) -> str:
    x, shape = ctx.input(0), ctx.shape(0)
    dtype = _output_dtype(ctx, 2)
    if dtype not in QUANT_DTYPES:
        ctx.unsupported(f"QuantizeLinear to {dtype}")
    eight_bit = _eight_bit_operands(ctx, dtype, ctx.type_of(0).dtype)
    if eight_bit is not None:  # a graph op the integer rewrite matches (passes/integer_qdq.py)
        operands, axis = eight_bit
        if len(operands) == 2:
            scale_shape = ctx.builder.type_of(operands[1]).shape
            operands.append(ctx.const(np.zeros(scale_shape, dtype)))
        return ctx.emit1("QuantizeLinear", operands, axis=axis)
    axis, block_size = int(ctx.attr("axis", 1)), int(ctx.attr("block_size", 0))
    scale = _broadcastable(ctx, ctx.input(1), shape, axis, block_size, "y_scale")
    precision = ctx.attr("precision", 0)
    compute = numpy_dtype(precision, ctx.where) if precision else ctx.type_of(0).dtype
    if not precision and ctx.builder.type_of(scale).dtype != compute:
        compute = "float32"  # numpy promotes mixed float16/float32 to float32
    scaled = ctx.emit1("Div", [cast_value(ctx, x, compute), cast_value(ctx, scale, compute)])
    zero_point = _broadcastable(ctx, ctx.input(2), shape, axis, block_size, "y_zero_point") \
        if ctx.has_input(2) else None
    if dtype in _INT_QUANT_RANGES:
        q = ctx.emit1("Cast", [ctx.emit1("Round", [scaled])], to="int32")
        if zero_point is not None:
            q = ctx.emit1("Add", [q, ctx.emit1("Cast", [zero_point], to="int32")])
        lo, hi = _INT_QUANT_RANGES[dtype]
        return ctx.emit1("Cast", [ctx.emit1("Clip", [q], min=lo, max=hi)], to=dtype)
    if dtype in FLOAT8_DTYPES:  # the zero point of a float8 type is zero by definition
        return cast_value(ctx, scaled, dtype, saturate=bool(ctx.attr("saturate", 1)))
    if zero_point is not None:  # float4: ONNX adds the zero point in float, then casts (saturating)
        scaled = ctx.emit1("Add", [scaled, cast_value(ctx, zero_point, compute)])
    return ctx.emit1("Cast", [scaled], to=dtype)


@converter("DequantizeLinear", since_version=10)
def dequantize_linear(ctx: ConvertContext) -> str:
    x, shape, x_dtype = ctx.input(0), ctx.shape(0), ctx.type_of(0).dtype
    declared = ctx.attr("output_dtype", 0)
    dtype = numpy_dtype(declared, ctx.where) if declared else ctx.type_of(1).dtype
    eight_bit = _eight_bit_operands(ctx, x_dtype, dtype)
    if eight_bit is not None:
        # Never folded at import, so that int8 weights reach the integer rewrite as integers.
        operands, axis = eight_bit
        return ctx.builder.add_node("DequantizeLinear", operands, 1, name_hint=ctx.hint, foldable=False,
                                    axis=axis)[0]
    axis, block_size = int(ctx.attr("axis", 1)), int(ctx.attr("block_size", 0))
    scale = _broadcastable(ctx, ctx.input(1), shape, axis, block_size, "x_scale")
    value = ctx.emit1("Cast", [x], to="float32")
    # Float8/float4 zero points are zero by definition; integers are subtracted exactly in float32.
    if ctx.has_input(2) and (x_dtype in _INT_QUANT_RANGES or x_dtype == "int32"):
        zero_point = _broadcastable(ctx, ctx.input(2), shape, axis, block_size, "x_zero_point")
        value = ctx.emit1("Sub", [value, ctx.emit1("Cast", [zero_point], to="float32")])
    value = ctx.emit1("Mul", [value, cast_value(ctx, scale, "float32")])
    return cast_value(ctx, value, dtype)


@converter("DynamicQuantizeLinear", since_version=11)
def dynamic_quantize_linear(ctx: ConvertContext) -> list[str]:
    """uint8 quantization with a scale and zero point taken from x's range (widened to include 0)."""
    x, shape = ctx.input(0), ctx.shape(0)
    if ctx.type_of(0).dtype != "float32":
        ctx.unsupported(f"DynamicQuantizeLinear of {ctx.type_of(0).dtype} (ONNX defines it for float32)")
    axes = tuple(range(len(shape)))
    low = ctx.emit1("Clip", [ctx.emit1("ReduceMin", [x], axes=axes, keepdims=0)], max=0.0)
    high = ctx.emit1("Clip", [ctx.emit1("ReduceMax", [x], axes=axes, keepdims=0)], min=0.0)
    span = ctx.emit1("Sub", [high, low])
    # A zero span (x all zeros) uses 1 instead, as ONNX's reference does.
    span = ctx.emit1("Where", [ctx.emit1("Equal", [span, ctx.const(np.float32(0))]), ctx.const(np.float32(1)), span])
    scale = ctx.emit1("Div", [span, ctx.const(np.float32(255))])
    initial = ctx.emit1("Sub", [ctx.const(np.float32(0)), ctx.emit1("Div", [low, scale])])
    zero_point = ctx.emit1("Round", [ctx.emit1("Clip", [initial], min=0.0, max=255.0)])
    q = ctx.emit1("Add", [ctx.emit1("Round", [ctx.emit1("Div", [x, scale])]), zero_point])
    y = ctx.emit1("Cast", [ctx.emit1("Clip", [q], min=0.0, max=255.0)], to="uint8")
    return [y, scale, ctx.emit1("Cast", [zero_point], to="uint8")]
