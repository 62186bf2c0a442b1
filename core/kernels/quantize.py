"""Quantized-domain computes: DequantizeLinear, QuantizeLinear (8-bit, per tensor or per axis) and Requantize
(int32 accumulator -> 8-bit in MLAS's order, so results agree with ONNX Runtime's integer kernels)."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..graph.op_defs.quantize import QUANT_INT_RANGES
from ..te import tensor as te
from ..tir.expr import Expr, call, cast, const, maximum, minimum
from .common import attr, broadcast_read, require
from .registry import register_compute


def _per_axis(t: Optional[te.Tensor], index: Sequence[Expr], axis: Optional[int]) -> Optional[Expr]:
    """A per-tensor (0-d) or per-axis (1-d, along `axis` of the output) parameter at output `index`."""
    if t is None:
        return None
    return t() if t.ndim == 0 else t(index[axis])


@register_compute("DequantizeLinear")
def dequantize_linear(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    x, scale = require(inputs, 2, "DequantizeLinear")
    zero = inputs[2] if len(inputs) > 2 else None
    axis = attrs.get("axis")

    def body(*i: Expr) -> Expr:
        value = cast("int32", x(*i))
        if zero is not None:
            value = value - cast("int32", _per_axis(zero, i, axis))
        return cast("float32", value) * _per_axis(scale, i, axis)

    return [te.compute(x.shape, body, name="dequantize", tag="elemwise")]


@register_compute("QuantizeLinear")
def quantize_linear(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    x, scale, zero = require(inputs, 3, "QuantizeLinear")
    axis = attrs.get("axis")
    lo, hi = QUANT_INT_RANGES[zero.dtype]

    def body(*i: Expr) -> Expr:
        # Rounded and shifted in float32 (exact for every in-range value), clamped before the integer cast.
        q = call("round", x(*i) / _per_axis(scale, i, axis)) + cast("float32", _per_axis(zero, i, axis))
        return cast(zero.dtype, minimum(maximum(q, const(float(lo), "float32")), const(float(hi), "float32")))

    return [te.compute(x.shape, body, name="quantize", tag="elemwise")]


@register_compute("Requantize")
def requantize(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    acc, multiplier = require(inputs, 2, "Requantize")
    to = str(attr(attrs, "to", "Requantize"))
    zero = int(attr(attrs, "zero_point", "Requantize"))
    lo, hi = int(attr(attrs, "min", "Requantize")), int(attr(attrs, "max", "Requantize"))

    def body(*i: Expr) -> Expr:
        # MLAS: float(acc) * multiplier, clamped to [min - zp, max - zp], rounded half to even, plus zp.
        scaled = cast("float32", acc(*i)) * broadcast_read(multiplier, i)
        clamped = minimum(maximum(scaled, const(float(lo - zero), "float32")), const(float(hi - zero), "float32"))
        return cast(to, cast("int32", call("round", clamped)) + const(zero, "int32"))

    return [te.compute(acc.shape, body, name="requantize", tag="broadcast")]
