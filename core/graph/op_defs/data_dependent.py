"""Ops whose output size depends on the data (NonZero, Compress, Unique). Kiln compiles static shapes, so
each writes its result into an upper-bound-sized output, padded with zeros, and a second int64
output `[axis, length]` saying how much of it is valid; the runtime trims graph outputs by it
(core.runtime.loader.trim_bounded) and the importer refuses such values as inputs of other ops."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, register_op

from ._common import expect_arity, expect_axis, expect_dtype

BOUND = TensorType((2,), "int64")


def padded(values: np.ndarray, axis: int, bound: int) -> np.ndarray:
    """`values` zero-padded along `axis` up to `bound` entries (what the kernels write)."""
    widths = [(0, bound - values.shape[a] if a == axis else 0) for a in range(values.ndim)]
    return np.pad(values, widths)


def _non_zero_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    x = inputs[0]
    found = np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)
    return [padded(found, 1, x.size), np.array([1, found.shape[1]], np.int64)]


@register_op("NonZero", Pattern.OPAQUE, fold=_non_zero_fold)
def _non_zero(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("NonZero", types, 1)
    x = types[0]
    if x.rank == 0:
        raise ShapeError("NonZero: a 0-d input has no coordinates to list")
    return [TensorType((x.rank, x.numel), "int64"), BOUND]


def compress_length(x: TensorType, condition: TensorType, axis: int) -> int:
    return min(condition.shape[0], x.shape[axis])


def _compress_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    x, condition = inputs
    axis = attrs["axis"]
    length = min(condition.shape[0], x.shape[axis])
    kept = np.compress(condition[:length], x, axis=axis)
    return [padded(kept, axis, length), np.array([axis, kept.shape[axis]], np.int64)]


@register_op("Compress", Pattern.OPAQUE, fold=_compress_fold)
def _compress(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("Compress", types, 2)
    x, condition = types
    expect_dtype("Compress", condition, {"bool"}, what="condition")
    axis = expect_axis("Compress", attrs.get("axis"), x.rank)
    if condition.rank != 1:
        raise ShapeError(f"Compress: condition {condition} must be 1-D")
    length = compress_length(x, condition, axis)
    return [TensorType(tuple(length if a == axis else d for a, d in enumerate(x.shape)), x.dtype), BOUND]


def _unique_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    x, axis, keep_sorted = inputs[0], attrs["axis"], attrs["sorted"]
    slices = np.moveaxis(x, axis, 0).reshape(x.shape[axis], -1)
    _, first, inverse, counts = np.unique(slices, axis=0, return_index=True, return_inverse=True,
                                          return_counts=True)
    inverse = inverse.reshape(-1)
    if not keep_sorted:  # number the distinct slices by first occurrence instead of by value
        order = np.argsort(first, kind="stable")
        renumber = np.empty_like(order)
        renumber[order] = np.arange(order.size)
        first, counts, inverse = first[order], counts[order], renumber[inverse]
    m, found = x.shape[axis], first.size
    y = np.take(x, first, axis=axis)
    as_i64 = lambda a: padded(a.astype(np.int64), 0, m)  # noqa: E731
    return [padded(y, axis, m), as_i64(first), inverse.astype(np.int64), as_i64(counts),
            np.array([axis, found], np.int64), np.array([0, found], np.int64)]


@register_op("Unique", Pattern.OPAQUE, fold=_unique_fold)
def _unique(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    """Outputs: Y, indices, inverse_indices, counts, Y's bound, and the bound of indices and counts."""
    expect_arity("Unique", types, 1)
    x = types[0]
    axis = expect_axis("Unique", attrs.get("axis"), x.rank)
    if attrs.get("sorted") not in (0, 1):
        raise ShapeError(f"Unique: sorted must be 0 or 1, got {attrs.get('sorted')!r}")
    per_slice = TensorType((x.shape[axis],), "int64")
    return [x, per_slice, per_slice, per_slice, BOUND, BOUND]
