"""SoftmaxAttention: softmax(scale * Q @ Kt + bias) @ V in one op (fuse_attention's rewrite of the MatMul,
Softmax, MatMul chain), with a causal mask from positions instead of a mask tensor."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, register_op

from ._common import FLOAT_DTYPES, broadcast_shapes, expect_arity, expect_dtype, expect_same_dtype


def causal_bias(rows: int, cols: int) -> np.ndarray:
    """0 where key j may be seen by query i (j <= i + cols - rows: the queries are the last rows), -inf elsewhere."""
    i, j = np.arange(rows)[:, None], np.arange(cols)[None, :]
    return np.where(j <= i + (cols - rows), 0.0, -np.inf).astype(np.float32)


def attention_reference(q: np.ndarray, kt: np.ndarray, v: np.ndarray, bias, attrs: Mapping) -> np.ndarray:
    """The op in float64 numpy (its constant fold and the tests' reference)."""
    s = np.matmul(q.astype(np.float64), kt.astype(np.float64)) * float(attrs.get("scale", 1.0))
    if bias is not None:
        s = s + bias
    if attrs.get("causal"):
        s = s + causal_bias(*s.shape[-2:])
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        p = e / e.sum(axis=-1, keepdims=True)
    if attrs.get("nan_to_zero"):
        p = np.where(np.isnan(p), 0.0, p)
    return np.matmul(p, v.astype(np.float64)).astype(q.dtype)


def _fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    q, kt, v = inputs[:3]
    return [attention_reference(q, kt, v, inputs[3] if len(inputs) > 3 else None, attrs)]


def _flops(inputs: Sequence, outputs: Sequence[TensorType], attrs: Mapping) -> int:
    """Both products' multiply-adds (two operations each), plus exp and normalization per score."""
    q, kt, v = inputs[:3]
    scores = q.numel // q.shape[-1] * kt.shape[-1]
    return 2 * scores * (q.shape[-1] + v.shape[-1]) + 4 * scores


@register_op("SoftmaxAttention", Pattern.OPAQUE, fold=_fold, flops=_flops)
def _softmax_attention(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    """Inputs q [..., M, D], kt [..., D, N], v [..., N, E] (same batch dims), optional bias broadcasting to
    [..., M, N]; attrs scale (float), causal (0/1), nan_to_zero (0/1: a row with no visible key gives zeros, as
    PyTorch's exported `Where(IsNaN(p), 0, p)` guard does)."""
    expect_arity("SoftmaxAttention", types, 3, 4)
    dtype = expect_same_dtype("SoftmaxAttention", types)
    expect_dtype("SoftmaxAttention", types[0], FLOAT_DTYPES)
    q, kt, v = types[:3]
    if not (q.rank == kt.rank == v.rank >= 2) or q.shape[:-2] != kt.shape[:-2] or q.shape[:-2] != v.shape[:-2]:
        raise ShapeError(f"SoftmaxAttention: q, kt, v need the same batch dims, got {q}, {kt}, {v}")
    if q.shape[-1] != kt.shape[-2] or kt.shape[-1] != v.shape[-2]:
        raise ShapeError(f"SoftmaxAttention: inner dimensions differ: {q} x {kt} x {v}")
    scores = q.shape[:-1] + (kt.shape[-1],)
    if len(types) > 3 and broadcast_shapes("SoftmaxAttention", scores, types[3].shape) != scores:
        raise ShapeError(f"SoftmaxAttention: bias {types[3]} does not broadcast to the scores {scores}")
    return [TensorType(q.shape[:-1] + (v.shape[-1],), dtype)]
