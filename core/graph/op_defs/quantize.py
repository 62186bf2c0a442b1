"""Quantized-domain ops: DequantizeLinear and QuantizeLinear (8-bit, per tensor or per axis) kept as graph ops
until the integer rewrite (passes/integer_qdq.py) has seen them, and Requantize (int32 accumulator -> 8-bit)."""
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
    to = attrs.get("to")
    if to not in QUANT_INT_RANGES:
        raise ShapeError(f"Requantize: attribute to must be int8 or uint8, got {to!r}")
    lo, hi = QUANT_INT_RANGES[to]
    bounds = [attrs.get(k) for k in ("zero_point", "min", "max")]
    if not all(isinstance(b, int) and lo <= b <= hi for b in bounds) or bounds[1] > bounds[2]:
        raise ShapeError(f"Requantize: zero_point, min and max must be {to} values with min <= max, got {bounds}")
    shape = broadcast_shapes("Requantize", acc.shape, multiplier.shape)
    if shape != acc.shape:
        raise ShapeError(f"Requantize: multiplier {multiplier} must broadcast to the accumulator {acc}")
    return [TensorType(acc.shape, to)]
