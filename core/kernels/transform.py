"""Data-movement computes: Reshape, Transpose, Concat, Slice, Gather, GatherElements, Expand, Pad."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..errors import ShapeError
from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Expr, cast, const, logical_and, maximum, minimum, select
from ..tir.index_guard import checked_index
from .common import attr, broadcast_read, prod, require, typed_const
from .registry import register_compute

Inputs = Sequence[Optional[te.Tensor]]


def _i64(value: int) -> Expr:
    return const(int(value), "int64")


@register_compute("Reshape")
def reshape(inputs: Inputs, attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "Reshape")
    shape = tuple(out_types[0].shape) if out_types else tuple(attr(attrs, "shape", "Reshape"))
    if prod(shape) != prod(x.shape):
        raise ShapeError(f"Reshape: cannot reshape {list(x.shape)} to {list(shape)}")

    def body(*i: Expr) -> Expr:
        if prod(shape) == 0:  # an empty tensor: nothing is read (and the strides below would divide by 0)
            return typed_const(0, x.dtype)
        flat = _i64(0)
        for dim, idx in zip(shape, i):
            flat = flat * dim + idx
        # Unflatten into the input's indices; the simplifier folds the div/mod of matching dims.
        idx_in = []
        stride = prod(x.shape)
        for dim in x.shape:
            stride //= dim
            idx_in.append((flat // stride) % dim if dim > 1 else _i64(0))
        return x(*idx_in)

    return [te.compute(shape, body, name="reshape", tag="injective")]


@register_compute("Transpose")
def transpose(inputs: Inputs, attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "Transpose")
    perm = tuple(attr(attrs, "perm", "Transpose", tuple(reversed(range(x.ndim)))))
    if sorted(perm) != list(range(x.ndim)):
        raise ShapeError(f"Transpose: perm {list(perm)} is not a permutation of rank {x.ndim}")
    shape = tuple(x.shape[p] for p in perm)

    def body(*i: Expr) -> Expr:
        idx = [None] * x.ndim
        for out_axis, in_axis in enumerate(perm):
            idx[in_axis] = i[out_axis]
        return x(*idx)

    return [te.compute(shape, body, name="transpose", tag="injective")]


@register_compute("Concat")
def concat(inputs: Inputs, attrs: Mapping[str, Any], out_types: list[TensorType]):
    parts = [t for t in inputs if t is not None]
    if not parts:
        raise ShapeError("Concat: expects at least one input")
    rank = parts[0].ndim
    axis = int(attr(attrs, "axis", "Concat"))
    axis = axis + rank if axis < 0 else axis
    parts = [t for t in parts if t.shape[axis] > 0]
    offsets = [0]
    for t in parts:
        offsets.append(offsets[-1] + t.shape[axis])
    shape = list(parts[0].shape)
    shape[axis] = offsets[-1]

    def body(*i: Expr) -> Expr:
        def read(k: int) -> Expr:
            idx = list(i)
            idx[axis] = i[axis] - offsets[k] if offsets[k] else i[axis]
            return parts[k](*idx)

        # The last part is the fallback; earlier parts take over below their end offset.
        out = read(len(parts) - 1)
        for k in range(len(parts) - 2, -1, -1):
            out = select(i[axis] < offsets[k + 1], read(k), out)
        return out

    return [te.compute(tuple(shape), body, name="concat", tag="injective")]


@register_compute("Slice")
def slice_(inputs: Inputs, attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "Slice")
    starts = tuple(attr(attrs, "starts", "Slice"))
    steps = tuple(attr(attrs, "steps", "Slice", (1,) * x.ndim))
    sizes = tuple(attr(attrs, "sizes", "Slice", tuple(out_types[0].shape) if out_types else ...))
    if not (len(starts) == len(steps) == len(sizes) == x.ndim):
        raise ShapeError(f"Slice: starts/steps/sizes must have one entry per axis of rank {x.ndim}")
    for d, s, st, n in zip(x.shape, starts, steps, sizes):
        if n > 0 and not (0 <= s < d and 0 <= s + (n - 1) * st < d):
            raise ShapeError(f"Slice: start {s}, step {st}, size {n} leave an axis of extent {d}")

    def body(*i: Expr) -> Expr:
        return x(*[idx * st + s if (st != 1 or s) else idx for idx, s, st in zip(i, starts, steps)])

    return [te.compute(sizes, body, name="slice", tag="injective")]


@register_compute("Gather")
def gather(inputs: Inputs, attrs: Mapping[str, Any], out_types: list[TensorType]):
    data, indices = require(inputs, 2, "Gather")
    axis = int(attr(attrs, "axis", "Gather", 0))
    axis = axis + data.ndim if axis < 0 else axis
    shape = data.shape[:axis] + indices.shape + data.shape[axis + 1:]
    q = indices.ndim

    def body(*i: Expr) -> Expr:
        idx = checked_index(indices(*i[axis:axis + q]) if q else indices(), data.shape[axis])
        return data(*i[:axis], idx, *i[axis + q:])

    return [te.compute(shape, body, name="gather", tag="injective")]


@register_compute("GatherElements")
def gather_elements(inputs: Inputs, attrs: Mapping[str, Any], out_types: list[TensorType]):
    data, indices = require(inputs, 2, "GatherElements")
    axis = int(attr(attrs, "axis", "GatherElements", 0))
    axis = axis + data.ndim if axis < 0 else axis
    if indices.ndim != data.ndim:
        raise ShapeError(f"GatherElements: data and indices must have the same rank, got {data.ndim} and {indices.ndim}")

    def body(*i: Expr) -> Expr:
        idx = list(i)
        idx[axis] = checked_index(indices(*i), data.shape[axis])
        return data(*idx)

    return [te.compute(indices.shape, body, name="gather_elements", tag="injective")]


@register_compute("Expand")
def expand(inputs: Inputs, attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "Expand")
    shape = tuple(out_types[0].shape) if out_types else tuple(attr(attrs, "shape", "Expand"))
    return [te.compute(shape, lambda *i: broadcast_read(x, i), name="expand", tag="broadcast")]


def pad_index(idx: Expr, begin: int, dim: int, mode: str) -> Expr:
    """The input index that output position `idx` reads for reflect/edge/wrap padding."""
    j = idx - begin if begin else idx
    if mode == "wrap":  # the input repeats periodically: floor modulo of the axis length
        return j % _i64(dim)
    if mode == "edge":
        return minimum(maximum(j, _i64(0)), _i64(dim - 1))
    if dim == 1:
        return _i64(0)
    # reflect (without repeating the edge): -j below 0, 2*(dim-1) - j above dim-1.
    j = select(j < _i64(0), -j, j)
    return select(j > _i64(dim - 1), _i64(2 * (dim - 1)) - j, j)


def pad(x: te.Tensor, begins: Sequence[int], ends: Sequence[int], mode: str = "constant", value: Any = 0,
        name: str = "pad", tag: str = "injective") -> te.Tensor:
    """`x` padded by `begins`/`ends` per axis (negative values crop), filled as ONNX Pad's `mode` says."""
    shape = tuple(d + b + e for d, b, e in zip(x.shape, begins, ends))
    if any(d <= 0 for d in shape):
        raise ShapeError(f"Pad: pads {list(begins) + list(ends)} leave nothing of {list(x.shape)}")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ShapeError(f"Pad: unknown mode {mode!r}")
    if mode == "reflect" and any(b >= d or e >= d for d, b, e in zip(x.shape, begins, ends)):
        raise ShapeError(f"Pad: reflect pads {list(begins) + list(ends)} must be smaller than {list(x.shape)}")
    fill = typed_const(value if value is not None else 0, x.dtype)

    def body(*i: Expr) -> Expr:
        if mode != "constant":
            return x(*[pad_index(idx, b, d, mode) for idx, b, d in zip(i, begins, x.shape)])
        conds, idx_in = [], []
        for idx, b, e, d in zip(i, begins, ends, x.shape):
            j = idx - b if b else idx
            idx_in.append(j)
            if b > 0:
                conds.append(j >= _i64(0))
            if e > 0:
                conds.append(j < _i64(d))
        if not conds:
            return x(*idx_in)
        inside = conds[0]
        for c in conds[1:]:
            inside = logical_and(inside, c)
        return select(inside, x(*idx_in), fill)

    return te.compute(shape, body, name=name, tag=tag)


@register_compute("Pad")
def pad_op(inputs: Inputs, attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "Pad")
    pads = tuple(attr(attrs, "pads", "Pad"))
    if len(pads) != 2 * x.ndim:
        raise ShapeError(f"Pad: expects {2 * x.ndim} pads for rank {x.ndim}, got {len(pads)}")
    return [pad(x, pads[: x.ndim], pads[x.ndim:], attr(attrs, "mode", "Pad", "constant"), attrs.get("value", 0))]


__all__ = ["pad", "pad_index"]
