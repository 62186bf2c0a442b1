"""Ops that select or pad elements by index: Slice, Gather, GatherElements, GatherND, Pad, Trilu,
EyeLike, OneHot, ReverseSequence."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, register_op

from ._common import INDEX_DTYPES, expect_arity, expect_axis, expect_dtype


def _ints(op: str, attrs: Mapping, key: str, length: int) -> tuple[int, ...]:
    value = attrs.get(key)
    if not isinstance(value, tuple) or len(value) != length or not all(isinstance(v, int) for v in value):
        raise ShapeError(f"{op}: attribute {key} must be {length} ints, got {value!r}")
    return value


def _slice_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    index = []
    for start, step, size in zip(attrs["starts"], attrs["steps"], attrs["sizes"]):
        if size == 0:
            index.append(slice(0, 0))
            continue
        stop = start + step * size
        index.append(slice(start, None if stop < 0 else stop, step))
    return [np.ascontiguousarray(inputs[0][tuple(index)])]


@register_op("Slice", Pattern.INJECTIVE, fold=_slice_fold)
def _slice(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("Slice", types, 1)
    x = types[0]
    starts, steps, sizes = (_ints("Slice", attrs, k, x.rank) for k in ("starts", "steps", "sizes"))
    for axis, (dim, start, step, size) in enumerate(zip(x.shape, starts, steps, sizes)):
        if step == 0 or size < 0:
            raise ShapeError(f"Slice: axis {axis} has step {step} and size {size}; steps must be non-zero")
        last = start + (size - 1) * step
        if size and not (0 <= start < dim and 0 <= last < dim):
            raise ShapeError(f"Slice: axis {axis} reads indices {start}..{last} outside [0, {dim})")
    return [TensorType(sizes, x.dtype)]


def _wrap_indices(op: str, indices: np.ndarray, dim: int) -> np.ndarray:
    # Negative indices count from the end once, as in ONNX; anything else out of range is an error.
    wrapped = np.where(indices < 0, indices + dim, indices).astype(np.int64)
    if wrapped.size and (wrapped.min() < 0 or wrapped.max() >= dim):
        raise ShapeError(f"{op}: index out of range for an axis of size {dim}")
    return wrapped


def _gather_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    data, indices = inputs
    axis = attrs["axis"]
    return [np.take(data, _wrap_indices("Gather", indices, data.shape[axis]), axis=axis)]


@register_op("Gather", Pattern.INJECTIVE, fold=_gather_fold)
def _gather(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("Gather", types, 2)
    data, indices = types
    expect_dtype("Gather", indices, INDEX_DTYPES, what="indices")
    axis = expect_axis("Gather", attrs.get("axis"), data.rank)
    return [TensorType(data.shape[:axis] + indices.shape + data.shape[axis + 1:], data.dtype)]


def _gather_elements_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    data, indices = inputs
    axis = attrs["axis"]
    # Other axes index the same position, so only the leading part of data along them is read.
    window = tuple(slice(None) if a == axis else slice(0, indices.shape[a]) for a in range(data.ndim))
    wrapped = _wrap_indices("GatherElements", indices, data.shape[axis])
    return [np.take_along_axis(data[window], wrapped, axis=axis)]


@register_op("GatherElements", Pattern.INJECTIVE, fold=_gather_elements_fold)
def _gather_elements(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("GatherElements", types, 2)
    data, indices = types
    expect_dtype("GatherElements", indices, INDEX_DTYPES, what="indices")
    axis = expect_axis("GatherElements", attrs.get("axis"), data.rank)
    if indices.rank != data.rank or any(i > d for a, (i, d) in enumerate(zip(indices.shape, data.shape)) if a != axis):
        raise ShapeError(f"GatherElements: indices {indices} do not fit data {data} along axis {axis}")
    return [TensorType(indices.shape, data.dtype)]


_PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    x = inputs[0]
    rank, pads, mode = x.ndim, attrs["pads"], attrs["mode"]
    widths = [(pads[a], pads[a + rank]) for a in range(rank)]
    if mode == "constant":
        return [np.pad(x, widths, mode="constant", constant_values=np.asarray(attrs["value"]).astype(x.dtype))]
    return [np.pad(x, widths, mode=mode)]


@register_op("Pad", Pattern.INJECTIVE, fold=_pad_fold)
def _pad(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("Pad", types, 1)
    x = types[0]
    pads = _ints("Pad", attrs, "pads", 2 * x.rank)
    mode = attrs.get("mode")
    if mode not in _PAD_MODES:
        raise ShapeError(f"Pad: mode must be one of {', '.join(_PAD_MODES)}, got {mode!r}")
    if any(p < 0 for p in pads):
        raise ShapeError(f"Pad: pads {list(pads)} must be non-negative")
    if not isinstance(attrs.get("value"), (int, float)):
        raise ShapeError(f"Pad: attribute value must be a number, got {attrs.get('value')!r}")
    for a, dim in enumerate(x.shape):
        if mode != "constant" and (pads[a] or pads[a + x.rank]) and dim == 0:
            raise ShapeError(f"Pad: mode {mode} cannot pad the empty axis {a}")
    return [TensorType(tuple(d + pads[a] + pads[a + x.rank] for a, d in enumerate(x.shape)), x.dtype)]


def _trilu_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    x, k = inputs[0], attrs["k"]
    return [np.triu(x, k) if attrs["upper"] else np.tril(x, k)]


@register_op("Trilu", Pattern.INJECTIVE, fold=_trilu_fold)
def _trilu(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("Trilu", types, 1)
    if types[0].rank < 2:
        raise ShapeError(f"Trilu: input {types[0]} must have rank 2 or more")
    if attrs.get("upper") not in (0, 1) or not isinstance(attrs.get("k"), int):
        raise ShapeError(f"Trilu: needs upper in (0, 1) and an int k, got {attrs.get('upper')!r}, {attrs.get('k')!r}")
    return [types[0]]


def _eye_like_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    rows, cols = inputs[0].shape
    return [np.eye(rows, cols, attrs["k"], dtype=attrs["dtype"])]


@register_op("EyeLike", Pattern.INJECTIVE, fold=_eye_like_fold)
def _eye_like(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("EyeLike", types, 1)
    if types[0].rank != 2:
        raise ShapeError(f"EyeLike: input {types[0]} must be 2-D")
    return [TensorType(types[0].shape, attrs["dtype"])]


def gather_nd_shape(data: Sequence[int], indices: Sequence[int], batch_dims: int) -> tuple[int, ...]:
    return tuple(indices[:-1]) + tuple(data[batch_dims + indices[-1]:])


def _gather_nd_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    data, indices = inputs
    b = attrs["batch_dims"]
    batch = int(np.prod(indices.shape[:b], dtype=np.int64))
    flat_data = data.reshape((batch,) + data.shape[b:])
    flat_idx = indices.reshape((batch, -1, indices.shape[-1]))
    depth = indices.shape[-1]
    wrapped = np.where(flat_idx < 0, flat_idx + np.array(data.shape[b:b + depth]), flat_idx)
    rows = [flat_data[n][tuple(wrapped[n].T)] for n in range(batch)]
    return [np.stack(rows).reshape(gather_nd_shape(data.shape, indices.shape, b))]


@register_op("GatherND", Pattern.INJECTIVE, fold=_gather_nd_fold)
def _gather_nd(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("GatherND", types, 2)
    data, indices = types
    expect_dtype("GatherND", indices, INDEX_DTYPES, what="indices")
    b = attrs.get("batch_dims")
    if not isinstance(b, int) or indices.rank < 1 or not 0 <= b < min(data.rank, indices.rank) \
            or data.shape[:b] != indices.shape[:b] or b + indices.shape[-1] > data.rank:
        raise ShapeError(f"GatherND: indices {indices} (batch_dims={b!r}) do not index data {data}")
    return [TensorType(gather_nd_shape(data.shape, indices.shape, b), data.dtype)]


def _one_hot_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    indices, values = inputs
    depth, axis = attrs["depth"], attrs["axis"]
    idx = indices.astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)
    hot = np.expand_dims(idx, axis) == np.arange(depth).reshape([-1 if a == axis else 1 for a in range(idx.ndim + 1)])
    return [np.where(hot, values[1], values[0]).astype(values.dtype)]


@register_op("OneHot", Pattern.INJECTIVE, fold=_one_hot_fold)
def _one_hot(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("OneHot", types, 2)
    indices, values = types
    depth, axis = attrs.get("depth"), attrs.get("axis")
    if values.shape != (2,):
        raise ShapeError(f"OneHot: values {values} must hold [off, on]")
    if not isinstance(depth, int) or depth < 1:
        raise ShapeError(f"OneHot: depth must be a positive int, got {depth!r}")
    expect_axis("OneHot", axis, indices.rank + 1)
    return [TensorType(indices.shape[:axis] + (depth,) + indices.shape[axis:], values.dtype)]


def _reverse_sequence_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    x, lengths = inputs
    out = x.copy()
    t_axis, b_axis = attrs["time_axis"], attrs["batch_axis"]
    for b, n in enumerate(lengths):
        index = [slice(None)] * x.ndim
        index[b_axis], index[t_axis] = b, slice(0, int(n))
        out[tuple(index)] = np.flip(x[tuple(index)], axis=t_axis - (1 if b_axis < t_axis else 0))
    return [out]


@register_op("ReverseSequence", Pattern.INJECTIVE, fold=_reverse_sequence_fold)
def _reverse_sequence(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("ReverseSequence", types, 2)
    x, lengths = types
    expect_dtype("ReverseSequence", lengths, {"int64"}, what="sequence_lens")
    t_axis, b_axis = attrs.get("time_axis"), attrs.get("batch_axis")
    if {t_axis, b_axis} != {0, 1} or x.rank < 2 or lengths.shape != (x.shape[b_axis],):
        raise ShapeError(f"ReverseSequence: input {x}, sequence_lens {lengths}, time_axis {t_axis!r} and "
                         f"batch_axis {b_axis!r} do not fit (the axes are 0 and 1)")
    return [x]
