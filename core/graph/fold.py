"""Constant evaluation of one node with its op's numpy `fold`, and when folding it is worth it: shared by
the fold_constants pass, GraphBuilder (which folds eagerly while importing) and the reference interpreter."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from core.graph.ir import TensorType
from core.graph.ops import get_op

# Folding must not blow up the weights: a node whose results are much larger than its constant
# inputs (Expand or Pad of a small constant) stays a node unless the results are small anyway.
FOLD_FLOOR_BYTES = 1 << 20
FOLD_GROWTH = 2


def worth_folding(inputs: Sequence[np.ndarray], output_types: Sequence[TensorType]) -> bool:
    produced = sum(t.nbytes for t in output_types)
    consumed = sum(a.nbytes for a in inputs if a is not None)
    return produced <= max(FOLD_FLOOR_BYTES, FOLD_GROWTH * consumed)


def fold_node(op: str, inputs: Sequence[np.ndarray | None], attrs: Mapping,
              output_types: Sequence[TensorType]) -> list[np.ndarray]:
    """Runs one op's numpy semantics and checks the results have exactly the inferred types."""
    definition = get_op(op)
    if definition.fold is None:
        raise NotImplementedError(f"op {op} has no fold function")
    results = [np.asarray(r) for r in definition.fold(list(inputs), attrs)]
    if len(results) != len(output_types):
        raise RuntimeError(f"{op}: fold returned {len(results)} results, type inference declared {len(output_types)}")
    for result, expected in zip(results, output_types):
        if result.shape != expected.shape or result.dtype.name != expected.dtype:
            raise RuntimeError(f"{op}: fold produced {result.dtype.name}{list(result.shape)}, "
                               f"type inference declared {expected}")
    return results
