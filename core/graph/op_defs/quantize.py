"""Quantized-domain ops: DequantizeLinear and QuantizeLinear (8-bit, per tensor or per axis) kept as graph ops
until the integer rewrite (passes/integer_qdq.py) has seen them, Requantize (int32 accumulator -> 8-bit),
QuantizedBinary (QDQ Add/Mul) and LookupTable (an 8-bit elementwise function tabulated)."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, register_op

from ._common import broadcast_shapes, expect_arity, expect_dtype

QUANT_INT_RANGES = {"int8": (-128, 127), "uint8": (0, 255)}
DEQUANTIZED_DTYPES = frozenset({"int8", "uint8", "int32"})


def per_axis_shape(scale_shape: Sequence[int], rank: int, axis: int) -> tuple[int, ...]:
    """How a per-tensor (shape ()) or per-axis (shape (C,)) scale broadcasts against a rank-`rank` tensor."""
    if len(scale_shape) == 0:
        return ()
    return tuple(scale_shape[0] if d == axis else 1 for d in range(rank))


def _check_scale(op: str, x: TensorType, scale: TensorType, attrs: Mapping, what: str) -> None:
    if scale.rank == 0:
        return
    axis = attrs.get("axis")
    if scale.rank != 1 or not isinstance(axis, int) or not 0 <= axis < x.rank or scale.shape[0] != x.shape[axis]:
        raise ShapeError(f"{op}: {what} {scale} is neither per tensor nor per axis {axis} of {x}")


def _broadcast(array: np.ndarray, rank: int, axis) -> np.ndarray:
    return array.reshape(per_axis_shape(array.shape, rank, axis))


def _dequantize_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    x, scale = inputs[0], inputs[1]
    zero = inputs[2] if len(inputs) > 2 and inputs[2] is not None else np.zeros((), x.dtype)
    shifted = x.astype(np.int64) - _broadcast(zero, x.ndim, attrs.get("axis")).astype(np.int64)
    return [(shifted.astype(np.float32) * _broadcast(scale, x.ndim, attrs.get("axis"))).astype(np.float32)]


@register_op("DequantizeLinear", Pattern.BROADCAST, fold=_dequantize_fold)
def _dequantize(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    """(x - zero_point) * scale in float32; x int8/uint8/int32, scale float32 of shape () or (x.shape[axis],)."""
    expect_arity("DequantizeLinear", types, 2, 3)
    x, scale = types[0], types[1]
    expect_dtype("DequantizeLinear", x, DEQUANTIZED_DTYPES)
    expect_dtype("DequantizeLinear", scale, {"float32"}, "scale")
    _check_scale("DequantizeLinear", x, scale, attrs, "scale")
    if len(types) == 3:
        if types[2].dtype != x.dtype or types[2].shape != scale.shape:
            raise ShapeError(f"DequantizeLinear: zero point {types[2]} does not match x {x} and scale {scale}")
    return [TensorType(x.shape, "float32")]


def _quantize_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    x, scale, zero = inputs[0], inputs[1], inputs[2]
    lo, hi = QUANT_INT_RANGES[zero.dtype.name]
    axis = attrs.get("axis")
    with np.errstate(all="ignore"):
        q = np.round(x.astype(np.float32) / _broadcast(scale, x.ndim, axis)) + _broadcast(zero, x.ndim, axis)
    return [np.clip(q, lo, hi).astype(zero.dtype)]


@register_op("QuantizeLinear", Pattern.BROADCAST, fold=_quantize_fold)
def _quantize(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    """saturate(round_half_even(x / scale) + zero_point): float32 x, scale of shape () or per axis, int8/uint8
    zero point shaped like the scale (its dtype is the output's)."""
    expect_arity("QuantizeLinear", types, 3)
    x, scale, zero = types
    expect_dtype("QuantizeLinear", x, {"float32"})
    expect_dtype("QuantizeLinear", scale, {"float32"}, "scale")
    expect_dtype("QuantizeLinear", zero, QUANT_INT_RANGES, "zero point")
    _check_scale("QuantizeLinear", x, scale, attrs, "scale")
    if zero.shape != scale.shape:
        raise ShapeError(f"QuantizeLinear: zero point {zero} does not match scale {scale}")
    return [TensorType(x.shape, zero.dtype)]


def requantize_reference(acc: np.ndarray, multiplier: np.ndarray, attrs: Mapping) -> np.ndarray:
    """MLAS's requantization order: float32(acc) * multiplier (float32), clamped to the output range less the
    zero point, rounded half to even, plus the zero point."""
    zero = int(attrs["zero_point"])
    lo, hi = int(attrs["min"]), int(attrs["max"])
    scaled = acc.astype(np.float32) * multiplier.astype(np.float32)
    clamped = np.clip(scaled, np.float32(lo - zero), np.float32(hi - zero))
    return (np.round(clamped).astype(np.int32) + zero).astype(attrs["to"])


def _requantize_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    return [requantize_reference(inputs[0], inputs[1], attrs)]


@register_op("Requantize", Pattern.BROADCAST, fold=_requantize_fold)
def _requantize(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    """int32 accumulator x float32 multiplier (s_x*s_w/s_y; per tensor or broadcast per channel) -> `to`
    (int8/uint8), rounded half to even, plus `zero_point`, saturated to [min, max] (the dtype's range, or a
    fused Relu/Clip's narrower one, both in the quantized domain)."""
    expect_arity("Requantize", types, 2)
    acc, multiplier = types
    expect_dtype("Requantize", acc, {"int32"}, "accumulator")
    expect_dtype("Requantize", multiplier, {"float32"}, "multiplier")
    to = _check_requantize_attrs("Requantize", attrs)
    shape = broadcast_shapes("Requantize", acc.shape, multiplier.shape)
    if shape != acc.shape:
        raise ShapeError(f"Requantize: multiplier {multiplier} must broadcast to the accumulator {acc}")
    return [TensorType(acc.shape, to)]


def _check_requantize_attrs(op: str, attrs: Mapping) -> str:
    """The output dtype `to` of an op ending in a requantization, after checking zero_point, min and max."""
    to = attrs.get("to")
    if to not in QUANT_INT_RANGES:
        raise ShapeError(f"{op}: attribute to must be int8 or uint8, got {to!r}")
    lo, hi = QUANT_INT_RANGES[to]
    bounds = [attrs.get(k) for k in ("zero_point", "min", "max")]
    if not all(isinstance(b, int) and lo <= b <= hi for b in bounds) or bounds[1] > bounds[2]:
        raise ShapeError(f"{op}: zero_point, min and max must be {to} values with min <= max, got {bounds}")
    return to


def quantized_binary_reference(a: np.ndarray, b: np.ndarray, attrs: Mapping) -> np.ndarray:
    """MLAS's QLinearAdd / QLinearMul in float32: add: a_ratio (a - a_zero) + b_ratio (b - b_zero); mul: ratio
    (a - a_zero)(b - b_zero); clamped to [min - zp, max - zp], rounded half to even, plus the zero point."""
    zero, lo, hi = (int(attrs[k]) for k in ("zero_point", "min", "max"))
    da = (a.astype(np.int32) - int(attrs["a_zero"])).astype(np.float32)
    db = (b.astype(np.int32) - int(attrs["b_zero"])).astype(np.float32)
    if attrs["kind"] == "add":
        value = np.float32(attrs["a_ratio"]) * da + np.float32(attrs["b_ratio"]) * db
    else:
        value = np.float32(attrs["ratio"]) * (da * db)
    clamped = np.clip(value.astype(np.float32), np.float32(lo - zero), np.float32(hi - zero))
    return (np.round(clamped).astype(np.int32) + zero).astype(attrs["to"])


@register_op("QuantizedBinary", Pattern.BROADCAST,
             fold=lambda inputs, attrs: [quantized_binary_reference(inputs[0], inputs[1], attrs)])
def _quantized_binary(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    """QDQ Add/Mul (ONNX Runtime's QLinearAdd/QLinearMul) on 8-bit a and b (numpy broadcasting): `kind` "add"
    (attrs a_ratio = s_a / s_y, b_ratio = s_b / s_y) or "mul" (ratio = s_a s_b / s_y), zero points a_zero, b_zero;
    the result requantized to `to` with zero_point, saturated to [min, max] (a fused Relu/Clip narrows them)."""
    expect_arity("QuantizedBinary", types, 2)
    for t, what in zip(types, ("a", "b")):
        expect_dtype("QuantizedBinary", t, QUANT_INT_RANGES, what)
    if attrs.get("kind") not in ("add", "mul"):
        raise ShapeError(f"QuantizedBinary: attribute kind must be add or mul, got {attrs.get('kind')!r}")
    to = _check_requantize_attrs("QuantizedBinary", attrs)
    return [TensorType(broadcast_shapes("QuantizedBinary", types[0].shape, types[1].shape), to)]


def lookup_index_offset(dtype: str) -> int:
    """What a LookupTable adds to an 8-bit value to index its table: 128 for int8, 0 for uint8."""
    return -QUANT_INT_RANGES[dtype][0]


def _lookup_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    x, table = inputs
    return [table[x.astype(np.int32) + lookup_index_offset(x.dtype.name)]]


@register_op("LookupTable", Pattern.BROADCAST, fold=_lookup_fold)
def _lookup_table(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    """y = table[x + offset]: an elementwise function of 8-bit x tabulated on its 256 values (a quantized Sigmoid,
    LeakyRelu...: dequantize, the float op, quantize, evaluated once at compile time); y has the table's dtype."""
    expect_arity("LookupTable", types, 2)
    x, table = types
    expect_dtype("LookupTable", x, QUANT_INT_RANGES)
    expect_dtype("LookupTable", table, QUANT_INT_RANGES, "table")
    if table.shape != (256,):
        raise ShapeError(f"LookupTable: table must have 256 entries, got {table}")
    return [TensorType(x.shape, table.dtype)]
