"""Normalizing ops kept whole for their numerics: Softmax, LogSoftmax (one axis) and LayerNormalization
(Y, then its float32 Mean and InvStdDev when attribute statistics is 1 or 2)."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, register_op

from ._common import FLOAT_DTYPES, broadcast_shapes, expect_arity, expect_axis, expect_dtype, expect_same_dtype


def _softmax_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    x = inputs[0]
    shifted = x.astype(np.float64) - np.max(x, axis=attrs["axis"], keepdims=True)
    e = np.exp(shifted)
    return [(e / e.sum(axis=attrs["axis"], keepdims=True)).astype(x.dtype)]


def _log_softmax_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    x = inputs[0]
    shifted = x.astype(np.float64) - np.max(x, axis=attrs["axis"], keepdims=True)
    return [(shifted - np.log(np.exp(shifted).sum(axis=attrs["axis"], keepdims=True))).astype(x.dtype)]


def _register_softmax(name: str, fold) -> None:
    def infer(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
        expect_arity(name, types, 1)
        expect_dtype(name, types[0], FLOAT_DTYPES)
        expect_axis(name, attrs.get("axis"), types[0].rank)
        return [types[0]]

    register_op(name, Pattern.OPAQUE, fold=fold)(infer)


_register_softmax("Softmax", _softmax_fold)
_register_softmax("LogSoftmax", _log_softmax_fold)


def _layer_norm_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    axes = tuple(range(attrs["axis"], x.ndim))
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axes, keepdims=True)
    variance = np.square(x64 - mean).mean(axis=axes, keepdims=True)
    inv_std = 1.0 / np.sqrt(variance + attrs["epsilon"])
    y = (x64 - mean) * inv_std * scale
    if bias is not None:
        y = y + bias
    return [y.astype(x.dtype), mean.astype(np.float32), inv_std.astype(np.float32)][:1 + attrs.get("statistics", 0)]


@register_op("LayerNormalization", Pattern.OPAQUE, fold=_layer_norm_fold)
def _layer_norm(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("LayerNormalization", types, 2, 3)
    expect_dtype("LayerNormalization", types[0], FLOAT_DTYPES)
    expect_same_dtype("LayerNormalization", types)
    x = types[0]
    axis = expect_axis("LayerNormalization", attrs.get("axis"), x.rank)
    if not isinstance(attrs.get("epsilon"), float):
        raise ShapeError(f"LayerNormalization: epsilon must be a float, got {attrs.get('epsilon')!r}")
    normalized = x.shape[axis:]
    for t in types[1:]:
        if t.rank > len(normalized) or broadcast_shapes("LayerNormalization", t.shape, normalized) != normalized:
            raise ShapeError(f"LayerNormalization: {t} does not broadcast to the normalized shape {list(normalized)}")
    count = attrs.get("statistics", 0)
    if count not in (0, 1, 2):
        raise ShapeError(f"LayerNormalization: statistics (Mean, InvStdDev outputs) must be 0, 1 or 2, got {count!r}")
    statistic = TensorType(x.shape[:axis] + (1,) * len(normalized), "float32")  # keepdims, like the kernel's
    return [x] + [statistic] * count
