"""Interpolate: separable resampling by constant per-axis tables (ONNX Resize and Upsample lower to it).

Inputs: x, then per resized axis its int32 index table [taps, out] (and, when `weighted`, its weight
table [taps, out]; tap-major so that neighbouring outputs read neighbouring entries), then when `masked` one bool table [out] per axis: output positions whose mask is
false on any axis are `extrapolation_value` (tf_crop_and_resize).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, register_op

from ._common import FLOAT_DTYPES


def table_layout(count: int, attrs: Mapping) -> tuple[tuple[int, ...], list[int], list[int | None], list[int | None]]:
    """(axes, index-table input per axis, weight-table input per axis or None, mask input per axis or None)."""
    axes = tuple(attrs.get("axes") or ())
    weighted, masked = bool(attrs.get("weighted")), bool(attrs.get("masked"))
    per_axis = 2 if weighted else 1
    expected = 1 + len(axes) * per_axis + (len(axes) if masked else 0)
    if not axes or count != expected:
        raise ShapeError(f"Interpolate: expects {expected} inputs for axes {list(axes)}, got {count}")
    indices = [1 + i * per_axis for i in range(len(axes))]
    weights = [1 + i * per_axis + 1 if weighted else None for i in range(len(axes))]
    masks = [1 + len(axes) * per_axis + i if masked else None for i in range(len(axes))]
    return axes, indices, weights, masks


def _infer(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    axes, indices, weights, masks = table_layout(len(types), attrs)
    x = types[0]
    shape = list(x.shape)
    for a, i, w, m in zip(axes, indices, weights, masks):
        if not 0 <= a < x.rank:
            raise ShapeError(f"Interpolate: axis {a} is out of range for {x}")
        table = types[i]
        if table.rank != 2 or table.dtype not in ("int32", "int64"):
            raise ShapeError(f"Interpolate: index table of axis {a} must be 2-D int, got {table}")
        if w is not None and (types[w].shape != table.shape or types[w].dtype not in FLOAT_DTYPES):
            raise ShapeError(f"Interpolate: weight table {types[w]} of axis {a} must match {table}")
        if m is not None and types[m].shape != (table.shape[1],):
            raise ShapeError(f"Interpolate: mask {types[m]} of axis {a} must have {table.shape[1]} entries")
        if attrs.get("weighted") and x.dtype not in FLOAT_DTYPES:
            raise ShapeError(f"Interpolate: weighted taps need float data, got {x}")
        shape[a] = table.shape[1]
    return [TensorType(tuple(shape), x.dtype)]


def interpolate_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    axes, indices, weights, masks = table_layout(len(inputs), attrs)
    x = inputs[0]
    y = x.astype(np.float64) if attrs.get("weighted") else x
    for a, i, w in zip(axes, indices, weights):
        table = inputs[i].T  # [out, taps]
        gathered = np.take(y, table, axis=a)  # [..., out, taps, ...]
        if w is None:
            y = np.take(gathered, 0, axis=a + 1)
        else:
            shape = (1,) * a + table.shape + (1,) * (x.ndim - a - 1)
            y = (gathered * inputs[w].T.astype(np.float64).reshape(shape)).sum(axis=a + 1)
    if attrs.get("masked"):
        inside = np.ones(y.shape, bool)
        for a, m in zip(axes, masks):
            inside &= inputs[m].astype(bool).reshape((1,) * a + (-1,) + (1,) * (x.ndim - a - 1))
        y = np.where(inside, y, attrs.get("extrapolation_value", 0.0))
    return [np.ascontiguousarray(y).astype(x.dtype, copy=False)]


register_op("Interpolate", Pattern.INJECTIVE, fold=interpolate_fold)(_infer)
