"""Scatter ops: ScatterElements (per-element targets along one axis) and ScatterND (index tuples),
with ONNX's reductions none/add/mul/max/min; TensorScatter (a KV-cache write along the sequence axis)."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, register_op

from ._common import INDEX_DTYPES, expect_arity, expect_axis, expect_dtype

REDUCTIONS = ("none", "add", "mul", "max", "min")
_COMBINE = {"none": lambda old, new: new, "add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _reduction(op: str, attrs: Mapping) -> str:
    reduction = attrs.get("reduction")
    if reduction not in REDUCTIONS:
        raise ShapeError(f"{op}: reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}")
    return reduction


def _wrap(indices: np.ndarray, dims) -> np.ndarray:
    wrapped = np.where(indices < 0, indices + dims, indices).astype(np.int64)
    if wrapped.size and ((wrapped < 0).any() or (wrapped >= dims).any()):
        raise ShapeError("scatter: index out of range")
    return wrapped


def _scatter_elements_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    data, indices, updates = inputs
    axis, combine = attrs["axis"], _COMBINE[attrs["reduction"]]
    out = data.copy()
    wrapped = _wrap(indices, data.shape[axis])
    for u in np.ndindex(*indices.shape):  # in update order, so that the last duplicate wins
        target = list(u)
        target[axis] = wrapped[u]
        out[tuple(target)] = combine(out[tuple(target)], updates[u])
    return [out]


@register_op("ScatterElements", Pattern.OPAQUE, fold=_scatter_elements_fold)
def _scatter_elements(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("ScatterElements", types, 3)
    data, indices, updates = types
    expect_dtype("ScatterElements", indices, INDEX_DTYPES, what="indices")
    axis = expect_axis("ScatterElements", attrs.get("axis"), data.rank)
    _reduction("ScatterElements", attrs)
    if indices.shape != updates.shape or updates.dtype != data.dtype or indices.rank != data.rank \
            or any(i > d for a, (i, d) in enumerate(zip(indices.shape, data.shape)) if a != axis):
        raise ShapeError(f"ScatterElements: indices {indices} and updates {updates} do not fit data {data}")
    return [data]


def _scatter_nd_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    data, indices, updates = inputs
    combine = _COMBINE[attrs["reduction"]]
    depth = indices.shape[-1]
    out = data.copy()
    wrapped = _wrap(indices, np.array(data.shape[:depth]))
    for q in np.ndindex(*indices.shape[:-1]):
        target = tuple(wrapped[q])
        out[target] = combine(out[target], updates[q])
    return [out]


@register_op("ScatterND", Pattern.OPAQUE, fold=_scatter_nd_fold)
def _scatter_nd(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("ScatterND", types, 3)
    data, indices, updates = types
    expect_dtype("ScatterND", indices, INDEX_DTYPES, what="indices")
    _reduction("ScatterND", attrs)
    depth = indices.shape[-1] if indices.rank else -1
    if not 1 <= depth <= data.rank or updates.dtype != data.dtype \
            or updates.shape != indices.shape[:-1] + data.shape[depth:]:
        raise ShapeError(f"ScatterND: indices {indices} and updates {updates} do not fit data {data}")
    return [data]


def _tensor_scatter_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    cache, update, write = inputs
    axis, circular = attrs["axis"], attrs["mode"] == "circular"
    out = cache.copy()
    for prefix in np.ndindex(*cache.shape[:axis]):
        for s in range(update.shape[axis]):
            at = int(write[prefix[0]]) + s
            out[prefix + (at % cache.shape[axis] if circular else at,)] = update[prefix + (s,)]
    return [out]


@register_op("TensorScatter", Pattern.INJECTIVE, fold=_tensor_scatter_fold)
def _tensor_scatter(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    """Inputs: the cache, the update, and one write index per batch entry (the frontend fills zeros)."""
    expect_arity("TensorScatter", types, 3)
    cache, update, write = types
    axis = expect_axis("TensorScatter", attrs.get("axis"), cache.rank)
    expect_dtype("TensorScatter", write, INDEX_DTYPES, what="write_indices")
    if attrs.get("mode") not in ("linear", "circular"):
        raise ShapeError(f"TensorScatter: mode must be linear or circular, got {attrs.get('mode')!r}")
    if axis == 0 or update.rank != cache.rank or update.dtype != cache.dtype or update.shape[axis] > cache.shape[axis] \
            or any(u != c for a, (u, c) in enumerate(zip(update.shape, cache.shape)) if a != axis) \
            or write.shape != (cache.shape[0],):
        raise ShapeError(f"TensorScatter: update {update} and write_indices {write} do not fit cache {cache} "
                         f"along axis {axis}")
    return [cache]
