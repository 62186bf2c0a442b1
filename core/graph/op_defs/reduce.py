"""Reductions over a sorted tuple of axes (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd), ArgMax/ArgMin
over one axis, the running reductions CumSum/CumProd, and TopK (k extremes along one axis, in order)."""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, register_op

from ._common import NUMERIC_DTYPES, expect_arity, expect_dtype


def reduced_shape(op: str, x: TensorType, attrs: Mapping) -> tuple[int, ...]:
    axes, keepdims = attrs.get("axes"), attrs.get("keepdims")
    if not isinstance(axes, tuple) or list(axes) != sorted(set(axes)) \
            or not all(isinstance(a, int) and 0 <= a < x.rank for a in axes):
        raise ShapeError(f"{op}: axes must be sorted distinct axes of {x}, got {axes!r}")
    if keepdims not in (0, 1):
        raise ShapeError(f"{op}: keepdims must be 0 or 1, got {keepdims!r}")
    if keepdims:
        return tuple(1 if a in axes else d for a, d in enumerate(x.shape))
    return tuple(d for a, d in enumerate(x.shape) if a not in axes)


def _register_reduce(name: str, reduce: Callable, needs_nonempty: bool, dtypes=NUMERIC_DTYPES) -> None:
    def infer(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
        expect_arity(name, types, 1)
        expect_dtype(name, types[0], dtypes)
        shape = reduced_shape(name, types[0], attrs)
        if needs_nonempty and any(types[0].shape[a] == 0 for a in attrs["axes"]):
            raise ShapeError(f"{name}: cannot reduce an empty axis of {types[0]}")
        return [TensorType(shape, types[0].dtype)]

    def fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
        x = inputs[0]
        result = reduce(x, axis=tuple(attrs["axes"]), keepdims=bool(attrs["keepdims"]))
        return [np.asarray(result).astype(x.dtype)]

    register_op(name, Pattern.REDUCTION, fold=fold)(infer)


def _mean(x: np.ndarray, axis, keepdims):
    # Accumulate in float64 so that integer means truncate the exact value, as ONNX Runtime does.
    return np.mean(x, axis=axis, keepdims=keepdims, dtype=np.float64)


_register_reduce("ReduceSum", np.sum, needs_nonempty=False)
_register_reduce("ReduceMean", _mean, needs_nonempty=True)
# Over bool, max is "any" and min is "all" (ReduceMax/ReduceMin 20+).
_register_reduce("ReduceMax", np.max, needs_nonempty=True, dtypes=NUMERIC_DTYPES | {"bool"})
_register_reduce("ReduceMin", np.min, needs_nonempty=True, dtypes=NUMERIC_DTYPES | {"bool"})
_register_reduce("ReduceProd", np.prod, needs_nonempty=False)


def _arg_fold(pick: Callable) -> Callable:
    def fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
        x, axis = inputs[0], attrs["axis"]
        if attrs.get("select_last_index"):
            # The last extreme is the first one of the reversed axis, counted from the end.
            index = x.shape[axis] - 1 - pick(np.flip(x, axis), axis=axis)
        else:
            index = pick(x, axis=axis)
        index = np.asarray(index, dtype=np.int64)
        return [np.expand_dims(index, axis) if attrs["keepdims"] else index]

    return fold


def _register_arg(name: str, pick: Callable) -> None:
    def infer(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
        expect_arity(name, types, 1)
        expect_dtype(name, types[0], NUMERIC_DTYPES)
        x, axis = types[0], attrs.get("axis")
        if not isinstance(axis, int) or not 0 <= axis < x.rank:
            raise ShapeError(f"{name}: axis must be a normalized axis of {x}, got {axis!r}")
        if x.shape[axis] == 0:
            raise ShapeError(f"{name}: cannot pick from the empty axis {axis} of {x}")
        return [TensorType(reduced_shape(name, x, {"axes": (axis,), "keepdims": attrs.get("keepdims")}), "int64")]

    # Two stages (the extreme value, then its first or last position): not fusable.
    register_op(name, Pattern.OPAQUE, fold=_arg_fold(pick))(infer)


_register_arg("ArgMax", np.argmax)
_register_arg("ArgMin", np.argmin)


def _cumulative_fold(accumulate: Callable, identity: int) -> Callable:
    def fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
        x, axis = inputs[0], attrs["axis"]
        src = np.flip(x, axis) if attrs["reverse"] else x
        if attrs["exclusive"]:
            # Shift by one along the axis: each position sees only the elements before it.
            head = np.full_like(np.take(src, [0], axis=axis), identity)
            src = np.concatenate([head, np.take(src, range(src.shape[axis] - 1), axis=axis)], axis=axis)
        out = accumulate(src, axis=axis, dtype=x.dtype)
        return [np.ascontiguousarray(np.flip(out, axis) if attrs["reverse"] else out)]

    return fold


def _register_cumulative(name: str, accumulate: Callable, identity: int) -> None:
    def infer(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
        expect_arity(name, types, 1)
        expect_dtype(name, types[0], NUMERIC_DTYPES)
        axis = attrs.get("axis")
        if not isinstance(axis, int) or not 0 <= axis < types[0].rank:
            raise ShapeError(f"{name}: axis must be a normalized axis of {types[0]}, got {axis!r}")
        if attrs.get("exclusive") not in (0, 1) or attrs.get("reverse") not in (0, 1):
            raise ShapeError(f"{name}: exclusive and reverse must be 0 or 1")
        return [types[0]]

    # A sequential scan (a hand-written loop program over its input buffer): not fusable.
    register_op(name, Pattern.OPAQUE, fold=_cumulative_fold(accumulate, identity))(infer)


_register_cumulative("CumSum", np.cumsum, 0)
_register_cumulative("CumProd", np.cumprod, 1)


def _top_k_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    x, axis, k = inputs[0], attrs["axis"], attrs["k"]
    # A stable sort keeps equal values in index order, as ONNX asks; largest sorts the negated key.
    key = x if not attrs["largest"] else (-x.astype(np.float64) if x.dtype.kind in "fu" else -x)
    order = np.argsort(key, axis=axis, kind="stable")
    indices = np.take(order, range(k), axis=axis).astype(np.int64)
    return [np.take_along_axis(x, indices, axis=axis), indices]


@register_op("TopK", Pattern.OPAQUE, fold=_top_k_fold)
def _top_k(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("TopK", types, 1)
    expect_dtype("TopK", types[0], NUMERIC_DTYPES)
    x, axis, k = types[0], attrs.get("axis"), attrs.get("k")
    if not isinstance(axis, int) or not 0 <= axis < x.rank:
        raise ShapeError(f"TopK: axis must be a normalized axis of {x}, got {axis!r}")
    if not isinstance(k, int) or not 0 <= k <= x.shape[axis]:
        raise ShapeError(f"TopK: k={k!r} must lie in [0, {x.shape[axis]}] for {x} along axis {axis}")
    shape = tuple(k if a == axis else d for a, d in enumerate(x.shape))
    return [TensorType(shape, x.dtype), TensorType(shape, "int64")]
