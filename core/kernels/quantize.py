"""Quantized-domain computes: DequantizeLinear, QuantizeLinear (8-bit, per tensor or per axis), Requantize (int32
accumulator -> 8-bit in MLAS's order, so results agree with ONNX Runtime's integer kernels), QuantizedBinary
(MLAS's QLinearAdd/QLinearMul) and LookupTable."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import numpy as np

from ..graph.ir import TensorType
from ..graph.op_defs.quantize import QUANT_INT_RANGES, lookup_index_offset
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

    def body(*i: Expr) -> Expr:
        # MLAS: float(acc) * multiplier, clamped to [min - zp, max - zp], rounded half to even, plus zp.
        return requantized(cast("float32", acc(*i)) * broadcast_read(multiplier, i), attrs, "Requantize")

    return [te.compute(acc.shape, body, name="requantize", tag="broadcast")]


def requantized(scaled: Expr, attrs: Mapping[str, Any], op: str) -> Expr:
    """float32 `scaled` (in output steps, less the zero point) clamped to [min - zp, max - zp], rounded half to
    even, plus the zero point, as attrs `to`."""
    to, zero = str(attr(attrs, "to", op)), int(attr(attrs, "zero_point", op))
    lo, hi = int(attr(attrs, "min", op)), int(attr(attrs, "max", op))
    clamped = minimum(maximum(scaled, const(float(lo - zero), "float32")), const(float(hi - zero), "float32"))
    return cast(to, cast("int32", call("round", clamped)) + const(zero, "int32"))


@register_compute("QuantizedBinary")
def quantized_binary(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    a, b = require(inputs, 2, "QuantizedBinary")
    shape = tuple(int(d) for d in np.broadcast_shapes(a.shape, b.shape))
    a_zero, b_zero = (const(int(attr(attrs, k, "QuantizedBinary")), "int32") for k in ("a_zero", "b_zero"))

    def body(*i: Expr) -> Expr:
        da, db = (cast("int32", broadcast_read(t, i)) - z for t, z in ((a, a_zero), (b, b_zero)))
        if attrs["kind"] == "add":
            value = const(float(attrs["a_ratio"]), "float32") * cast("float32", da) + \
                const(float(attrs["b_ratio"]), "float32") * cast("float32", db)
        else:  # (a - za)(b - zb) is exact in int32 and float32 (|product| <= 2^16)
            value = const(float(attrs["ratio"]), "float32") * cast("float32", da * db)
        return requantized(value, attrs, "QuantizedBinary")

    return [te.compute(shape, body, name="quantized_binary", tag="broadcast")]


@register_compute("LookupTable")
def lookup_table(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    x, table = require(inputs, 2, "LookupTable")
    offset = const(lookup_index_offset(x.dtype), "int32")
    return [te.compute(x.shape, lambda *i: table(cast("int32", x(*i)) + offset), name="lookup_table",
                       tag="elemwise")]
