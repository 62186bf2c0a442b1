"""Unary elementwise ops (Relu, Exp, trigonometry, Cast, BitCast, Clip, ...): same shape in and out, numpy folds."""
from __future__ import annotations

import math
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, register_op
from core.narrow_dtypes import MINIFLOATS, SUBBYTE_INTS, cast_array

from ._common import FLOAT_DTYPES, INT_DTYPES, NUMERIC_DTYPES, expect_arity, expect_dtype

_ANY = None  # any dtype accepted
_BOOL = frozenset({"bool"})
_SIGNED_NUMERIC = NUMERIC_DTYPES - {"uint8", "uint16", "uint32", "uint64"}

_vector_erf = np.frompyfunc(math.erf, 1, 1)


def _erf(x: np.ndarray) -> np.ndarray:
    # numpy has no erf; math.erf is exact to double precision and bert-sized tensors are small.
    return _vector_erf(x.astype(np.float64)).astype(np.float64)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # The two-branch form never overflows exp().
    z = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + z), z / (1.0 + z))


def _register_unary(name: str, fn: Callable[[np.ndarray], np.ndarray], accepts: Iterable[str] | None,
                    out_dtype: str | None = None) -> None:
    allowed = None if accepts is None else frozenset(accepts)

    def infer(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
        expect_arity(name, types, 1)
        if allowed is not None:
            expect_dtype(name, types[0], allowed)
        return [TensorType(types[0].shape, out_dtype or types[0].dtype)]

    def fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
        x = inputs[0]
        with np.errstate(all="ignore"):
            return [np.asarray(fn(x)).astype(out_dtype or x.dtype, copy=False)]

    register_op(name, Pattern.ELEMWISE, fold=fold)(infer)


_register_unary("Relu", lambda x: np.maximum(x, np.zeros((), x.dtype)), _SIGNED_NUMERIC)
_register_unary("Sigmoid", _sigmoid, FLOAT_DTYPES)
_register_unary("Tanh", np.tanh, FLOAT_DTYPES)
_register_unary("Erf", _erf, FLOAT_DTYPES)
_register_unary("Sqrt", np.sqrt, FLOAT_DTYPES)
_register_unary("Exp", np.exp, FLOAT_DTYPES)
_register_unary("Log", np.log, FLOAT_DTYPES)
_register_unary("Neg", np.negative, _SIGNED_NUMERIC)
_register_unary("Abs", np.abs, NUMERIC_DTYPES)
_register_unary("Reciprocal", np.reciprocal, FLOAT_DTYPES)
_register_unary("Floor", np.floor, FLOAT_DTYPES)
_register_unary("Ceil", np.ceil, FLOAT_DTYPES)
_register_unary("Not", np.logical_not, _BOOL)
_register_unary("IsNaN", np.isnan, FLOAT_DTYPES, out_dtype="bool")
_register_unary("Identity", np.copy, _ANY)
_register_unary("Round", np.round, FLOAT_DTYPES)  # numpy rounds half to even, as ONNX does
_register_unary("Sign", np.sign, NUMERIC_DTYPES)
_register_unary("BitwiseNot", np.invert, INT_DTYPES)
for _name, _fn in {"Sin": np.sin, "Cos": np.cos, "Tan": np.tan, "Asin": np.arcsin, "Acos": np.arccos,
                   "Atan": np.arctan, "Sinh": np.sinh, "Cosh": np.cosh, "Asinh": np.arcsinh, "Acosh": np.arccosh,
                   "Atanh": np.arctanh}.items():
    _register_unary(_name, _fn, FLOAT_DTYPES)


def _isinf_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    x = inputs[0]
    positive = np.isposinf(x) if attrs.get("detect_positive", True) else np.zeros(x.shape, bool)
    negative = np.isneginf(x) if attrs.get("detect_negative", True) else np.zeros(x.shape, bool)
    return [positive | negative]


@register_op("IsInf", Pattern.ELEMWISE, fold=_isinf_fold)
def _isinf(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("IsInf", types, 1)
    expect_dtype("IsInf", types[0], FLOAT_DTYPES)
    return [TensorType(types[0].shape, "bool")]


def _bitcast_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    return [np.ascontiguousarray(inputs[0]).view(attrs["to"])]


def _bit_width(dtype: str) -> int:
    # Sub-byte dtypes take a whole byte in memory but have fewer bits: int4 is not a bit-cast of int8.
    if dtype in SUBBYTE_INTS:
        return SUBBYTE_INTS[dtype][0]
    if dtype in MINIFLOATS:
        return MINIFLOATS[dtype].bits
    return np.dtype(dtype).itemsize * 8


@register_op("BitCast", Pattern.ELEMWISE, fold=_bitcast_fold)
def _bitcast(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("BitCast", types, 1)
    try:
        target = np.dtype(attrs["to"])
    except (KeyError, TypeError) as err:
        raise ShapeError(f"BitCast: attribute 'to' must be a numpy dtype name, got {attrs.get('to')!r}") from err
    if _bit_width(target.name) != _bit_width(types[0].dtype):
        raise ShapeError(f"BitCast: {types[0].dtype} and {target.name} differ in size; "
                         "the bits cannot be reinterpreted")
    return [TensorType(types[0].shape, target.name)]


def _cast_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    with np.errstate(all="ignore"):
        return [cast_array(inputs[0], attrs["to"])]  # astype; e8m0 rounds up as the kernel does


@register_op("Cast", Pattern.ELEMWISE, fold=_cast_fold)
def _cast(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("Cast", types, 1)
    try:
        target = np.dtype(attrs["to"]).name
    except (KeyError, TypeError) as err:
        raise ShapeError(f"Cast: attribute 'to' must be a numpy dtype name, got {attrs.get('to')!r}") from err
    return [TensorType(types[0].shape, target)]


def _clip_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    x = inputs[0]
    low, high = attrs.get("min"), attrs.get("max")
    if low is not None:
        x = np.maximum(x, np.asarray(low).astype(x.dtype))
    if high is not None:
        x = np.minimum(x, np.asarray(high).astype(x.dtype))
    return [np.array(x, dtype=inputs[0].dtype)]


@register_op("Clip", Pattern.ELEMWISE, fold=_clip_fold)
def _clip(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("Clip", types, 1)
    expect_dtype("Clip", types[0], NUMERIC_DTYPES)
    for key in ("min", "max"):
        if attrs.get(key) is not None and not isinstance(attrs[key], (int, float)):
            raise ShapeError(f"Clip: attribute {key} must be a number or None, got {attrs[key]!r}")
    return [types[0]]


def _leaky_relu_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    x = inputs[0]
    return [np.where(x >= 0, x, x * np.asarray(attrs["alpha"], x.dtype)).astype(x.dtype, copy=False)]


@register_op("LeakyRelu", Pattern.ELEMWISE, fold=_leaky_relu_fold)
def _leaky_relu(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("LeakyRelu", types, 1)
    expect_dtype("LeakyRelu", types[0], FLOAT_DTYPES)
    if not isinstance(attrs.get("alpha"), (int, float)):
        raise ShapeError("LeakyRelu: attribute alpha must be a number")
    return [types[0]]
