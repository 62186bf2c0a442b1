"""Shared checks for op type inference (arity, dtype families, broadcasting; each raises ShapeError
naming the op first) and the FLOP count of ops made of multiply-adds."""
from __future__ import annotations

from typing import Callable, Iterable, Mapping, Optional, Sequence

import numpy as np

from core import narrow_dtypes as _narrow
from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import FlopsFn

FLOAT_DTYPES = frozenset({"float16", "float32", "float64", "bfloat16"})  # bfloat16 computes as float32
INT_DTYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})
NUMERIC_DTYPES = FLOAT_DTYPES | INT_DTYPES
INDEX_DTYPES = frozenset({"int32", "int64"})
# Narrow dtypes (core/narrow_dtypes.py, ml_dtypes names): floats held as float32 in registers, sub-byte ints as i8.
NARROW_FLOAT_DTYPES = frozenset(_narrow.NARROW_FLOAT_DTYPES)
FLOAT8_DTYPES = frozenset({"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"})
SUBBYTE_INT_DTYPES = frozenset(_narrow.SUBBYTE_INTS)
# What QuantizeLinear may produce and DequantizeLinear read (ONNX's quantized types Kiln supports).
QUANT_DTYPES = frozenset({"int8", "uint8", "int16", "uint16", "float4_e2m1fn"}) | FLOAT8_DTYPES | SUBBYTE_INT_DTYPES


def expect_arity(op: str, types: Sequence[TensorType], least: int, most: int | None = None) -> None:
    most = least if most is None else most
    if not least <= len(types) <= most:
        wanted = str(least) if least == most else f"{least} to {most}"
        raise ShapeError(f"{op}: expects {wanted} inputs, got {len(types)}")


def expect_dtype(op: str, t: TensorType, allowed: Iterable[str], what: str = "input") -> None:
    allowed = frozenset(allowed)
    if t.dtype not in allowed:
        raise ShapeError(f"{op}: {what} has dtype {t.dtype}, expected one of {', '.join(sorted(allowed))}")


def expect_same_dtype(op: str, types: Sequence[TensorType]) -> str:
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1:
        raise ShapeError(f"{op}: inputs must share one dtype, got {', '.join(t.dtype for t in types)}")
    return types[0].dtype


def broadcast_shapes(op: str, *shapes: Sequence[int]) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*(tuple(s) for s in shapes)))
    except ValueError:
        raise ShapeError(f"{op}: shapes {' and '.join(str(list(s)) for s in shapes)} do not broadcast") from None


def expect_axis(op: str, axis: int, rank: int, name: str = "axis") -> int:
    if not isinstance(axis, (int, np.integer)) or not 0 <= axis < rank:
        raise ShapeError(f"{op}: {name}={axis} is out of range for rank {rank} (attributes must be normalized)")
    return int(axis)


def same_type(t: TensorType) -> list[TensorType]:
    return [TensorType(t.shape, t.dtype)]


def multiply_add_flops(macs_per_output: Callable[[Sequence[Optional[TensorType]]], int]) -> FlopsFn:
    """FLOPs of an op whose every output element takes `macs_per_output(input types)` multiply-adds,
    each counted as two operations."""

    def flops(inputs: Sequence[Optional[TensorType]], outputs: Sequence[TensorType], attrs: Mapping) -> int:
        return 2 * outputs[0].numel * macs_per_output(inputs)

    return flops
