"""MatMul: numpy matmul semantics for rank >= 2 operands, batch dimensions broadcast."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, register_op
from core.packing.panels import unpack_weights

from ._common import NUMERIC_DTYPES, broadcast_shapes, expect_arity, expect_dtype, expect_same_dtype, multiply_add_flops


def _matmul_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    a, b = inputs
    if attrs.get("packed_columns") is not None:
        b = unpack_weights(b, attrs["packed_columns"])  # a constant packed by pack_matmul_weights
    compute = np.float32 if a.dtype == np.float16 else a.dtype
    out = np.dtype(attrs["accumulate"]) if attrs.get("accumulate") else a.dtype
    return [np.matmul(a.astype(compute, copy=False), b.astype(compute, copy=False)).astype(out, copy=False)]


@register_op("MatMul", Pattern.OUT_ELEMWISE_FUSABLE, fold=_matmul_fold,
             flops=multiply_add_flops(lambda inputs: inputs[0].shape[-1]))
def _matmul(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("MatMul", types, 2)
    dtype = expect_same_dtype("MatMul", types)
    expect_dtype("MatMul", types[0], NUMERIC_DTYPES)
    a, b = types
    if attrs.get("packed_columns") is not None:  # b holds panels [..., N/nr, K, nr] of a [..., K, N] weight
        b = TensorType(b.shape[:-3] + (b.shape[-2], int(attrs["packed_columns"])), b.dtype)
    if a.rank < 2 or b.rank < 2:
        raise ShapeError(f"MatMul: operands must have rank >= 2 (the frontend reshapes vectors), got {a} and {b}")
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"MatMul: inner dimensions differ: {a} x {b}")
    batch = broadcast_shapes("MatMul", a.shape[:-2], b.shape[:-2])
    # `accumulate` (half_matmul_operands, GPU tensor cores): float16 operands, a float32 sum and result
    return [TensorType(batch + (a.shape[-2], b.shape[-1]), attrs.get("accumulate") or dtype)]
