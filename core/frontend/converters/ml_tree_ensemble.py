"""ai.onnx.ml opset 5 TreeEnsemble (node and leaf tables, integer modes, set membership) onto the TreeEnsemble op;
post transforms other than NONE are refused (ONNX and ONNX Runtime number them differently)."""
from __future__ import annotations

import numpy as np

from .ml_trees import ML, TreeNodes, ensemble_scores, int_attr, pack_trees
from .registry import ConvertContext, converter

# ONNX's integer codes, in order: nodes_modes, aggregate_function and post_transform.
_MODE_CODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ", "BRANCH_MEMBER")
_AGGREGATE_CODES = ("average", "sum", "min", "max")
_TRANSFORM_CODES = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


def _tensor(ctx: ConvertContext, name: str, dtype) -> np.ndarray:
    value = ctx.attr_tensor(name)
    return np.zeros(0, dtype) if value is None else value.reshape(-1).astype(dtype)


def _member_sets(ctx: ConvertContext, modes: np.ndarray, dtype: str) -> dict[int, np.ndarray]:
    """Per BRANCH_MEMBER node, its set: membership_values lists the sets in node order, NaN-delimited."""
    members = [i for i, m in enumerate(modes) if m == _MODE_CODES.index("BRANCH_MEMBER")]
    if not members:
        return {}
    values = _tensor(ctx, "membership_values", dtype)
    cuts = np.flatnonzero(np.isnan(values))
    sets = np.split(values, cuts)
    sets = [s[~np.isnan(s)] for s in sets]
    if len(sets) > len(members) and not sets[-1].size:  # a trailing NaN closes the last set
        sets.pop()
    if len(sets) != len(members):
        ctx.fail(f"membership_values holds {len(sets)} sets for {len(members)} BRANCH_MEMBER nodes")
    return dict(zip(members, sets))


def tree_nodes(ctx: ConvertContext, dtype: str) -> TreeNodes:
    """The opset 5 tables in the opset 1-3 layout: tree r is the nodes reached from tree_roots[r], an interior
    node keeps its index as its id, leaf j gets id len(nodes) + j, and a BRANCH_MEMBER node becomes a chain of
    BRANCH_EQ nodes, one per member (what ONNX Runtime does too)."""
    features, trues, falses = int_attr(ctx, "nodes_featureids"), int_attr(ctx, "nodes_truenodeids"), \
        int_attr(ctx, "nodes_falsenodeids")
    true_leaf, false_leaf = int_attr(ctx, "nodes_trueleafs"), int_attr(ctx, "nodes_falseleafs")
    modes = _tensor(ctx, "nodes_modes", np.int64)
    splits = _tensor(ctx, "nodes_splits", dtype)
    missing = int_attr(ctx, "nodes_missing_value_tracks_true")
    count = features.size
    missing = np.zeros(count, np.int64) if missing.size == 0 else missing
    if count == 0 or any(a.size != count for a in (trues, falses, true_leaf, false_leaf, modes, splits, missing)):
        ctx.fail("the nodes_* attributes must be non-empty and of one length")
    if modes.min() < 0 or modes.max() >= len(_MODE_CODES):
        ctx.fail(f"nodes_modes must lie in [0, {len(_MODE_CODES)})")
    leaf_targets, leaf_weights = int_attr(ctx, "leaf_targetids"), _tensor(ctx, "leaf_weights", dtype)
    if leaf_targets.size != leaf_weights.size or leaf_targets.size == 0:
        ctx.fail("leaf_targetids and leaf_weights must be non-empty and of one length")
    roots = int_attr(ctx, "tree_roots")
    if roots.size == 0 or roots.min() < 0 or roots.max() >= count:
        ctx.fail(f"tree_roots must be non-empty and lie in [0, {count})")
    sets = _member_sets(ctx, modes, dtype)

    rows: list[tuple] = []  # (tree, node id, feature, true id, false id, mode, split, missing)
    weights: list[tuple] = []  # (tree, leaf id, target, weight)
    next_id = count + leaf_targets.size

    def child(tree: int, index: int, is_leaf: int, pending: list[int], seen: set[int]) -> int:
        limit = leaf_targets.size if is_leaf else count
        if not 0 <= index < limit:
            ctx.fail(f"tree {tree} points to {'leaf' if is_leaf else 'node'} {index}, which does not exist")
        if is_leaf:
            if index not in seen:
                seen.add(index)
                weights.append((tree, count + index, int(leaf_targets[index]), leaf_weights[index]))
            return count + index
        if index not in seen:
            seen.add(index)
            pending.append(index)
        return index

    for tree, root in enumerate(roots.tolist()):
        pending, seen_nodes, seen_leaves = [root], {root}, set()
        while pending:
            k = pending.pop()
            t = child(tree, int(trues[k]), int(true_leaf[k]), pending, seen_leaves if true_leaf[k] else seen_nodes)
            f = child(tree, int(falses[k]), int(false_leaf[k]), pending, seen_leaves if false_leaf[k] else seen_nodes)
            if k not in sets:
                rows.append((tree, k, int(features[k]), t, f, _MODE_CODES[int(modes[k])], splits[k], int(missing[k])))
                continue
            members = sets[k] if sets[k].size else np.asarray([np.nan], dtype)  # x == NaN never holds
            ids = [k] + list(range(next_id, next_id + members.size - 1))
            next_id += members.size - 1
            for j, (node, member) in enumerate(zip(ids, members)):
                otherwise = ids[j + 1] if j + 1 < len(ids) else f
                rows.append((tree, node, int(features[k]), t, otherwise, "BRANCH_EQ", member, int(missing[k])))
    leaves = sorted({(w[0], w[1]) for w in weights})
    rows += [(tree, node, 0, 0, 0, "LEAF", 0.0, 0) for tree, node in leaves]
    tree_ids, node_ids, feature_ids, true_ids, false_ids, node_modes, values, tracks = zip(*rows)
    w_trees, w_nodes, w_targets, w_values = zip(*weights)
    return TreeNodes(np.asarray(tree_ids, np.int64), np.asarray(node_ids, np.int64),
                     np.asarray(feature_ids, np.int64), np.asarray(true_ids, np.int64),
                     np.asarray(false_ids, np.int64), list(node_modes), np.asarray(values, dtype),
                     np.asarray(tracks, np.int64), np.asarray(w_trees, np.int64), np.asarray(w_nodes, np.int64),
                     np.asarray(w_targets, np.int64), np.asarray(w_values, dtype))


def _code(ctx: ConvertContext, name: str, default: int, names: tuple) -> str:
    value = int(ctx.attr(name, default))
    if not 0 <= value < len(names):
        ctx.fail(f"{name} must lie in [0, {len(names)})")
    return names[value]


@converter("TreeEnsemble", since_version=5, domain=ML)
def tree_ensemble(ctx: ConvertContext) -> str:
    t = ctx.type_of(0)
    if t.dtype not in ("float32", "float64") or t.rank != 2:
        ctx.fail(f"expects X of shape (rows, features) in float or double, got {t}")
    targets = int(ctx.attr("n_targets", 0))
    if targets < 1:
        ctx.fail("n_targets must be at least 1")
    aggregate = _code(ctx, "aggregate_function", 1, _AGGREGATE_CODES)
    transform = _code(ctx, "post_transform", 0, _TRANSFORM_CODES)
    if transform != "NONE":  # ONNX Runtime 1.32 reads 1 as LOGISTIC and 2 as SOFTMAX, and skips LOGISTIC for
        # one target (onnxruntime#26596): no answer would match both the standard and the runtime users check with
        ctx.unsupported(f"post_transform {transform}: ONNX numbers SOFTMAX 1 and LOGISTIC 2 but ONNX Runtime reads "
                        "them the other way round, so export with post_transform NONE (0) and apply Softmax or "
                        "Sigmoid as ONNX ops after the TreeEnsemble")
    tables = pack_trees(ctx, tree_nodes(ctx, t.dtype), targets, t.dtype,
                        partial_targets=aggregate in ("sum", "average"))
    if aggregate in ("min", "max") and not tables.scored.all():
        ctx.unsupported(f"aggregate_function {aggregate.upper()} with targets that some trees do not score")
    return ensemble_scores(ctx, ctx.input(0), tables, targets, aggregate)
