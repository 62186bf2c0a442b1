"""Ops whose output size depends on the data (NonZero, Compress, Unique, NonMaxSuppression).
Kiln compiles static shapes, so each writes its result into an upper-bound-sized output, padded
with zeros, and a second int64 output `[axis, length]` saying how much of it is valid; the runtime
trims graph outputs by it (core.runtime.loader.trim_bounded), and later ops take it as a run-time
length (core/graph/bounded.py)."""
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


def nms_rows(batches: int, classes: int, boxes: int, max_output: int) -> int:
    """The upper bound on selections (at least one row, so that the buffer is never empty)."""
    return max(1, batches * classes * min(max_output, boxes))


def _corners(box: np.ndarray, center: bool) -> tuple[float, float, float, float]:
    if center:
        return box[0] - box[2] / 2, box[0] + box[2] / 2, box[1] - box[3] / 2, box[1] + box[3] / 2
    return min(box[1], box[3]), max(box[1], box[3]), min(box[0], box[2]), max(box[0], box[2])


def _suppresses(a: np.ndarray, b: np.ndarray, center: bool, threshold: float) -> bool:
    ax0, ax1, ay0, ay1 = _corners(a, center)
    bx0, bx1, by0, by1 = _corners(b, center)
    ix, iy = min(ax1, bx1) - max(ax0, bx0), min(ay1, by1) - max(ay0, by0)
    inter = ix * iy
    area_a, area_b = (ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0)
    union = area_a + area_b - inter
    return bool(ix > 0 and iy > 0 and inter > 0 and area_a > 0 and area_b > 0 and union > 0
                and inter / union > threshold)


def _nms_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    boxes, scores = inputs[:2]
    if len(inputs) > 2:  # only the first `valid` boxes take part (a data-dependent number of them)
        valid = int(inputs[2].reshape(-1)[0])
        boxes, scores = boxes[:, :valid], scores[:, :, :valid]
    batches, classes, n = scores.shape
    keep, center = min(attrs["max_output"], n), bool(attrs["center_point_box"])
    threshold = attrs.get("score_threshold")
    found = []
    for b in range(batches):
        for c in range(classes):
            order = sorted(range(n), key=lambda i: (-scores[b, c, i], i))
            kept: list[int] = []
            for i in order:
                if len(kept) >= keep or (threshold is not None and not scores[b, c, i] > threshold):
                    continue
                if not any(_suppresses(boxes[b, i], boxes[b, j], center, attrs["iou_threshold"]) for j in kept):
                    kept.append(i)
                    found.append((b, c, i))
    rows = nms_rows(batches, classes, inputs[1].shape[2], attrs["max_output"])
    selected = np.array(found, np.int64).reshape(-1, 3)
    return [padded(selected, 0, rows), np.array([0, len(found)], np.int64)]


@register_op("NonMaxSuppression", Pattern.OPAQUE, fold=_nms_fold)
def _nms(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("NonMaxSuppression", types, 2, 3)
    boxes, scores = types[:2]
    if len(types) > 2 and (types[2].shape != (1,) or types[2].dtype != "int64"):
        raise ShapeError(f"NonMaxSuppression: the count of valid boxes must be int64 [1], got {types[2]}")
    if boxes.rank != 3 or scores.rank != 3 or boxes.shape[2] != 4 or boxes.shape[0] != scores.shape[0] \
            or boxes.shape[1] != scores.shape[2]:
        raise ShapeError(f"NonMaxSuppression: boxes {boxes} must be [B, N, 4] and scores {scores} [B, C, N]")
    if not isinstance(attrs.get("max_output"), int) or attrs["max_output"] < 0:
        raise ShapeError(f"NonMaxSuppression: max_output must be a non-negative int, got {attrs.get('max_output')!r}")
    batches, classes, n = scores.shape
    return [TensorType((nms_rows(batches, classes, n, attrs["max_output"]), 3), "int64"), BOUND]
