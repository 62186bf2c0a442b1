"""Binary broadcasting ops (arithmetic, remainders, comparison, logic, bit operations) and Where, with numpy
broadcasting."""
from __future__ import annotations

from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from core.graph.ir import TensorType
from core.graph.ops import Pattern, register_op

from ._common import INT_DTYPES, NUMERIC_DTYPES, broadcast_shapes, expect_arity, expect_dtype, expect_same_dtype

_BOOL = frozenset({"bool"})
_COMPARABLE = NUMERIC_DTYPES | _BOOL


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind not in "iu":
        return np.divide(a, b)
    # Integer division truncates toward zero (C, ONNX Runtime), numpy's // floors; x/0 gives 0.
    safe_b = np.where(b == 0, np.ones((), b.dtype), b)
    quotient = np.floor_divide(a, safe_b)
    remainder = a - quotient * safe_b
    adjust = (remainder != 0) & ((a < 0) != (safe_b < 0))
    quotient = quotient + adjust.astype(a.dtype)
    return np.where(b == 0, np.zeros((), a.dtype), quotient)


def _power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu" and np.any(b < 0):
        # numpy refuses negative integer exponents; go through float64 and truncate like C.
        return np.trunc(np.power(a.astype(np.float64), b.astype(np.float64))).astype(a.dtype)
    return np.power(a, b)


def _floor_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # numpy's %: the remainder has the divisor's sign; integer x % 0 gives 0 (as numpy and the kernel do).
    return np.mod(a, b)


def _trunc_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # C's % and fmod: the remainder has the dividend's sign.
    if a.dtype.kind in "iu":
        return np.where(b == 0, np.zeros((), a.dtype), np.fmod(a, np.where(b == 0, np.ones((), b.dtype), b)))
    return np.fmod(a, b)


def _shift(a: np.ndarray, b: np.ndarray, left: bool) -> np.ndarray:
    # ONNX BitShift: a shift outside [0, bit width) gives 0, or the sign fill for a right shift of a signed value.
    a, b = np.broadcast_arrays(a, b)
    bits = np.iinfo(a.dtype).bits
    valid = (b >= 0) & (b < bits)
    amount = np.where(valid, b, 0).astype(a.dtype)
    if left:
        unsigned = np.dtype(f"u{a.dtype.itemsize}")
        shifted = np.left_shift(a.view(unsigned), amount.view(unsigned)).view(a.dtype)
        return np.where(valid, shifted, np.zeros((), a.dtype))
    fill = np.where(a < 0, -1, 0).astype(a.dtype) if a.dtype.kind == "i" else np.zeros((), a.dtype)
    return np.where(valid, np.right_shift(a, amount), fill)


def _register_binary(name: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], accepts: Iterable[str],
                     out_dtype: str | None = None) -> None:
    allowed = frozenset(accepts)

    def infer(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
        expect_arity(name, types, 2)
        dtype = expect_same_dtype(name, types)
        expect_dtype(name, types[0], allowed)
        shape = broadcast_shapes(name, types[0].shape, types[1].shape)
        return [TensorType(shape, out_dtype or dtype)]

    def fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
        a, b = inputs
        with np.errstate(all="ignore"):
            return [np.asarray(fn(a, b)).astype(out_dtype or a.dtype, copy=False)]

    register_op(name, Pattern.BROADCAST, fold=fold)(infer)


_register_binary("Add", np.add, NUMERIC_DTYPES)
_register_binary("Sub", np.subtract, NUMERIC_DTYPES)
_register_binary("Mul", np.multiply, NUMERIC_DTYPES)
_register_binary("Div", _divide, NUMERIC_DTYPES)
_register_binary("Pow", _power, NUMERIC_DTYPES)
_register_binary("Max", np.maximum, NUMERIC_DTYPES)
_register_binary("Min", np.minimum, NUMERIC_DTYPES)
_register_binary("Equal", np.equal, _COMPARABLE, out_dtype="bool")
_register_binary("Less", np.less, NUMERIC_DTYPES, out_dtype="bool")
_register_binary("Greater", np.greater, NUMERIC_DTYPES, out_dtype="bool")
_register_binary("LessOrEqual", np.less_equal, NUMERIC_DTYPES, out_dtype="bool")
_register_binary("GreaterOrEqual", np.greater_equal, NUMERIC_DTYPES, out_dtype="bool")
_register_binary("And", np.logical_and, _BOOL)
_register_binary("Or", np.logical_or, _BOOL)
_register_binary("FloorMod", _floor_mod, NUMERIC_DTYPES)
_register_binary("TruncMod", _trunc_mod, NUMERIC_DTYPES)
_register_binary("BitwiseAnd", np.bitwise_and, INT_DTYPES | _BOOL)
_register_binary("BitwiseOr", np.bitwise_or, INT_DTYPES | _BOOL)
_register_binary("BitwiseXor", np.bitwise_xor, INT_DTYPES | _BOOL)
_register_binary("BitShiftLeft", lambda a, b: _shift(a, b, left=True), INT_DTYPES)
_register_binary("BitShiftRight", lambda a, b: _shift(a, b, left=False), INT_DTYPES)


def _where_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    cond, x, y = inputs
    return [np.where(cond, x, y).astype(x.dtype, copy=False)]


@register_op("Where", Pattern.BROADCAST, fold=_where_fold)
def _where(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("Where", types, 3)
    expect_dtype("Where", types[0], _BOOL, what="condition")
    dtype = expect_same_dtype("Where", types[1:])
    return [TensorType(broadcast_shapes("Where", *(t.shape for t in types)), dtype)]

