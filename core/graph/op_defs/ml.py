"""Classic ML (ai.onnx.ml): TreeEnsemble, the summed leaf weights of a decision-tree ensemble over flat node tables."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, register_op

from ._common import expect_arity, expect_dtype

# Inputs after X, in order: the node table every tree shares (node index is global across trees), one row of
# NODE_FIELDS per node so that a step reads one cache line, the threshold's bits stored as an integer of its width;
# then the leaf weights (node, target - the tree's offset) and the per-tree tables. A leaf points to itself
# (left == right == its own index), so a walk of a tree's depth ends on it.
TREE_TABLES = ("nodes", "leaf_weights", "roots", "depths", "target_offsets")
NODE_FIELDS = ("feature", "threshold", "left", "right")
NAN_TRUE_TABLE = "nan_goes_true"  # optional last input: per node, 1 where a missing (NaN) value takes the true branch
BRANCH_MODES = ("leq", "lt", "gte", "gt", "eq", "neq")  # ONNX's BRANCH_LEQ ... BRANCH_NEQ: go left when x OP threshold
AGGREGATES = ("sum", "average", "min", "max")


def node_table(feature: np.ndarray, threshold: np.ndarray, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """The (nodes, 4) integer table of NODE_FIELDS: int32 for float32 thresholds, int64 for float64 ones."""
    bits = np.dtype(f"int{threshold.dtype.itemsize * 8}")
    return np.stack([feature.astype(bits), threshold.view(bits), left.astype(bits), right.astype(bits)], axis=1)


def threshold_dtype(nodes: np.dtype) -> str:
    return "float32" if np.dtype(nodes) == np.int32 else "float64"


def branch_taken(x: np.ndarray, threshold: np.ndarray, mode: str) -> np.ndarray:
    """Whether x goes to the true (left) child, the comparison of `mode`."""
    return {"leq": np.less_equal, "lt": np.less, "gte": np.greater_equal, "gt": np.greater,
            "eq": np.equal, "neq": np.not_equal}[mode](x, threshold)


def tree_ensemble_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    """The reference: every row walks every tree, leaf weights aggregated per target."""
    x, nodes, leaf, roots, depths, offsets = inputs[:6]
    feature, left, right = nodes[:, 0], nodes[:, 2], nodes[:, 3]
    threshold = np.ascontiguousarray(nodes[:, 1]).view(threshold_dtype(nodes.dtype))
    nan_true = inputs[6] if len(inputs) > 6 else np.zeros(feature.shape, np.uint8)
    targets, aggregate = int(attrs["n_targets"]), attrs["aggregate"]
    rows, width = x.shape[0], leaf.shape[1]
    node = np.broadcast_to(roots[None, :], (rows, roots.size)).astype(np.int64)
    for _ in range(int(depths.max(initial=0))):
        value = np.take_along_axis(x, feature[node], axis=1)
        go_left = branch_taken(value, threshold[node], attrs["mode"]) | (np.isnan(value) & (nan_true[node] != 0))
        node = np.where(go_left, left[node], right[node])
    init = {"sum": 0.0, "average": 0.0, "min": np.inf, "max": -np.inf}[aggregate]
    out = np.full((rows, targets), init, x.dtype)
    for t in range(roots.size):
        cols = slice(int(offsets[t]), int(offsets[t]) + width)
        contribution = leaf[node[:, t]]
        if aggregate in ("sum", "average"):
            out[:, cols] += contribution
        else:
            out[:, cols] = (np.minimum if aggregate == "min" else np.maximum)(out[:, cols], contribution)
    if aggregate == "average":
        out /= x.dtype.type(max(1, roots.size))
    return [out]


def _tree_flops(inputs: Sequence, outputs: Sequence[TensorType], attrs: Mapping) -> int:
    # One comparison per level walked: rows x trees x the mean depth (an estimate of work, not of arithmetic).
    rows, trees = outputs[0].shape[0], inputs[3].shape[0]
    return rows * trees * max(1, int(attrs.get("mean_depth", 1)))


@register_op("TreeEnsemble", Pattern.OPAQUE, fold=tree_ensemble_fold, flops=_tree_flops)
def _tree_ensemble(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("TreeEnsemble", types, 1 + len(TREE_TABLES), 2 + len(TREE_TABLES))
    x, nodes, leaf, roots, depths, offsets = types[:6]
    expect_dtype("TreeEnsemble", x, ("float32", "float64"))
    if x.rank != 2:
        raise ShapeError(f"TreeEnsemble: X must be (rows, features), got {x}")
    for name, t in zip(("roots", "depths", "target_offsets"), (roots, depths, offsets)):
        expect_dtype("TreeEnsemble", t, ("int32",), name)
    expect_dtype("TreeEnsemble", nodes, ("int32" if x.dtype == "float32" else "int64",), "nodes")
    expect_dtype("TreeEnsemble", leaf, (x.dtype,), "leaf_weights")
    if nodes.rank != 2 or nodes.shape[1] != len(NODE_FIELDS) or leaf.rank != 2 or leaf.shape[0] != nodes.shape[0] \
            or roots.shape != depths.shape or roots.shape != offsets.shape:
        raise ShapeError("TreeEnsemble: node and tree tables do not line up")
    if len(types) > 6 and types[6].shape != nodes.shape[:1]:
        raise ShapeError(f"TreeEnsemble: {NAN_TRUE_TABLE} must have one entry per node")
    if attrs.get("mode") not in BRANCH_MODES or attrs.get("aggregate") not in AGGREGATES:
        raise ShapeError(f"TreeEnsemble: mode must be one of {BRANCH_MODES} and aggregate one of {AGGREGATES}")
    targets = int(attrs["n_targets"])
    if targets < leaf.shape[1]:
        raise ShapeError(f"TreeEnsemble: leaves hold {leaf.shape[1]} targets but n_targets is {targets}")
    return [TensorType((x.shape[0], targets), x.dtype)]


# -- SVM probability estimates ------------------------------------------------------------------
COUPLING_ITERATIONS = 100  # libsvm's (and ONNX Runtime's) cap on the fixed-point iterations


def pairwise_coupling(r: np.ndarray) -> np.ndarray:
    """Class probabilities [k] from pairwise ones r[i, j] = P(i beats j) (libsvm's multiclass_probability,
    Wu, Lin and Weng's second method), in float32 and in ONNX Runtime's order of operations."""
    f32 = np.float32
    k = r.shape[0]
    q = np.zeros((k, k), f32)
    for i in range(k):
        for j in range(k):
            if j != i:
                q[i, i] = f32(q[i, i] + r[j, i] * r[j, i])
                q[i, j] = q[j, i] if j < i else f32(-r[j, i] * r[i, j])
    p, qp, eps = np.full(k, f32(1) / f32(k), f32), np.zeros(k, f32), f32(0.005) / f32(k)
    for _ in range(COUPLING_ITERATIONS):
        pqp = f32(0)
        for i in range(k):
            qp[i] = f32(0)
            for j in range(k):
                qp[i] = f32(qp[i] + q[i, j] * p[j])
            pqp = f32(pqp + p[i] * qp[i])
        if max(abs(f32(qp[i] - pqp)) for i in range(k)) < eps:
            break
        for i in range(k):
            diff = f32(f32(-qp[i] + pqp) / q[i, i])
            p[i] = f32(p[i] + diff)
            pqp = f32(f32(f32(pqp + diff * f32(diff * q[i, i] + f32(2) * qp[i])) / f32(1 + diff)) / f32(1 + diff))
            for j in range(k):
                qp[j] = f32(f32(qp[j] + diff * q[i, j]) / f32(1 + diff))
                p[j] = f32(p[j] / f32(1 + diff))
    return p


def _coupling_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    return [np.stack([pairwise_coupling(row) for row in inputs[0]]).astype(np.float32)]


def _coupling_flops(inputs: Sequence[TensorType], outputs: Sequence[TensorType], attrs: Mapping) -> int:
    rows, k = outputs[0].shape
    return rows * COUPLING_ITERATIONS * 4 * k * k  # an upper bound: most rows stop after a few iterations


@register_op("PairwiseCoupling", Pattern.OPAQUE, fold=_coupling_fold, flops=_coupling_flops)
def _pairwise_coupling(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("PairwiseCoupling", types, 1)
    (r,) = types
    expect_dtype("PairwiseCoupling", r, ("float32",))
    if r.rank != 3 or r.shape[1] != r.shape[2] or r.shape[1] < 2:
        raise ShapeError(f"PairwiseCoupling: expects pairwise probabilities (rows, k, k) with k >= 2, got {r}")
    return [TensorType(r.shape[:2], "float32")]
