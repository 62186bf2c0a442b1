"""Data movement ops that only rearrange elements: Reshape, Transpose, Concat, Expand."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, register_op

from ._common import broadcast_shapes, expect_arity, expect_axis, expect_same_dtype


def _int_tuple(op: str, attrs: Mapping, key: str) -> tuple[int, ...]:
    value = attrs.get(key)
    if not isinstance(value, tuple) or not all(isinstance(v, int) for v in value):
        raise ShapeError(f"{op}: attribute {key} must be a tuple of ints, got {value!r}")
    return value


def _reshape_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    return [inputs[0].reshape(attrs["shape"]).copy()]


@register_op("Reshape", Pattern.INJECTIVE, fold=_reshape_fold)
def _reshape(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("Reshape", types, 1)
    shape = _int_tuple("Reshape", attrs, "shape")
    if any(d < 0 for d in shape):
        raise ShapeError(f"Reshape: shape {list(shape)} must be fully resolved (no -1)")
    if int(np.prod(shape, dtype=np.int64)) != types[0].numel:
        raise ShapeError(f"Reshape: cannot reshape {types[0]} ({types[0].numel} elements) to {list(shape)}")
    return [TensorType(shape, types[0].dtype)]


def _transpose_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    return [np.ascontiguousarray(np.transpose(inputs[0], attrs["perm"]))]


@register_op("Transpose", Pattern.INJECTIVE, fold=_transpose_fold)
def _transpose(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("Transpose", types, 1)
    perm = _int_tuple("Transpose", attrs, "perm")
    x = types[0]
    if sorted(perm) != list(range(x.rank)):
        raise ShapeError(f"Transpose: perm {list(perm)} is not a permutation of the {x.rank} axes of {x}")
    return [TensorType(tuple(x.shape[p] for p in perm), x.dtype)]


def _concat_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    return [np.concatenate(inputs, axis=attrs["axis"])]


@register_op("Concat", Pattern.INJECTIVE, fold=_concat_fold)
def _concat(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    if not types:
        raise ShapeError("Concat: expects at least one input")
    dtype = expect_same_dtype("Concat", types)
    rank = types[0].rank
    axis = expect_axis("Concat", attrs.get("axis"), rank)
    for t in types:
        if t.rank != rank or any(t.shape[a] != types[0].shape[a] for a in range(rank) if a != axis):
            raise ShapeError(f"Concat: inputs {', '.join(map(str, types))} differ outside axis {axis}")
    shape = list(types[0].shape)
    shape[axis] = sum(t.shape[axis] for t in types)
    return [TensorType(shape, dtype)]


def _expand_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    return [np.array(np.broadcast_to(inputs[0], attrs["shape"]))]


@register_op("Expand", Pattern.BROADCAST, fold=_expand_fold)
def _expand(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("Expand", types, 1)
    shape = _int_tuple("Expand", attrs, "shape")
    if broadcast_shapes("Expand", types[0].shape, shape) != shape:
        raise ShapeError(f"Expand: attribute shape {list(shape)} must be the final broadcast shape of {types[0]}")
    return [TensorType(shape, types[0].dtype)]
