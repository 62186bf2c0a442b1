"""ai.onnx.ml tree ensembles: TreeEnsembleRegressor and TreeEnsembleClassifier (ml opsets 1-3) as one compiled
TreeEnsemble op over flat node tables (branch modes mixed in one ensemble rewritten to BRANCH_LEQ), followed by
ONNX Runtime's own post-processing (base values, the binary-classifier rules, post_transform, labels) as graph
ops; ZipMap is refused with the export fix."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from core.graph.op_defs.ml import BRANCH_MODES, TREE_TABLES, node_table

from .registry import ConvertContext, converter

ML = "ai.onnx.ml"
_MODES = {f"BRANCH_{m.upper()}": m for m in BRANCH_MODES}
_TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX")


@dataclass
class TreeTables:
    """An ensemble's flat tables (see core/graph/op_defs/ml.py) and what the post-processing needs to know."""

    nodes: np.ndarray
    leaf_weights: np.ndarray
    roots: np.ndarray
    depths: np.ndarray
    target_offsets: np.ndarray
    nan_goes_true: np.ndarray | None
    mode: str
    scored: np.ndarray  # per target: every row gets a weight for it (False: no row does)
    all_weights_positive: bool
    used_targets: frozenset


def _floats(ctx: ConvertContext, name: str, dtype: str) -> np.ndarray | None:
    tensor = ctx.attr_tensor(f"{name}_as_tensor")
    if tensor is not None:
        return tensor.astype(dtype).reshape(-1)
    value = ctx.attr(name)
    return None if value is None else np.asarray(value, np.float32).astype(dtype)


def int_attr(ctx: ConvertContext, name: str) -> np.ndarray:
    return np.asarray(ctx.attr(name, []), np.int64).reshape(-1)


@dataclass
class TreeNodes:
    """An ensemble's nodes and leaf weights as ONNX's opset 1-3 attributes lay them out: parallel arrays, one
    entry per node (modes are "LEAF" or "BRANCH_*") and one per (leaf, target) weight."""

    tree_ids: np.ndarray
    node_ids: np.ndarray
    features: np.ndarray
    trues: np.ndarray
    falses: np.ndarray
    modes: list[str]
    values: np.ndarray
    missing: np.ndarray
    weight_trees: np.ndarray
    weight_nodes: np.ndarray
    weight_targets: np.ndarray
    weights: np.ndarray


def node_attributes(ctx: ConvertContext, prefix: str, dtype: str) -> TreeNodes:
    """The nodes_* attributes and the leaf weights (`prefix`: "class" or "target") of ml opsets 1-3."""
    values = _floats(ctx, "nodes_values", dtype)
    node_ids = int_attr(ctx, "nodes_nodeids")
    missing = int_attr(ctx, "nodes_missing_value_tracks_true")
    weights = _floats(ctx, f"{prefix}_weights", dtype)
    return TreeNodes(int_attr(ctx, "nodes_treeids"), node_ids, int_attr(ctx, "nodes_featureids"),
                     int_attr(ctx, "nodes_truenodeids"), int_attr(ctx, "nodes_falsenodeids"),
                     list(ctx.attr("nodes_modes", [])), np.zeros(len(node_ids), dtype) if values is None else values,
                     np.zeros(len(node_ids), np.int64) if missing.size == 0 else missing,
                     int_attr(ctx, f"{prefix}_treeids"), int_attr(ctx, f"{prefix}_nodeids"), int_attr(ctx, f"{prefix}_ids"),
                     np.zeros(0, dtype) if weights is None else weights)


def _just_below(threshold: float, dtype: str) -> float:
    """The largest normal value below `threshold`, so that x < t is x <= it; NaN below -inf (x <= NaN never
    holds). Subnormal steps round down to the next normal one: compiled code flushes subnormals to zero."""
    t = np.asarray(threshold, dtype)
    if t == -np.inf:
        return float("nan")
    below, tiny = float(np.nextafter(t, np.asarray(-np.inf, dtype))), float(np.finfo(dtype).tiny)
    return below if below == 0 or abs(below) >= tiny else (-tiny if below < 0 else 0.0)


def as_less_equal(trees: TreeNodes, dtype: str) -> TreeNodes:
    """The same ensemble with BRANCH_LEQ nodes only, for ensembles that mix branch modes (the kernel compiles one
    comparison): > and >= swap the children of <= and < (a missing value keeps its branch), x < t is
    x <= the float just below t, and x == t becomes two nodes, x <= t then not x <= the float just below t."""
    trees = TreeNodes(**{k: (list(v) if isinstance(v, list) else v.copy()) for k, v in vars(trees).items()})
    trees.values = trees.values.astype(dtype)
    next_id: dict[int, int] = {}
    for tree, node in zip(trees.tree_ids, trees.node_ids):
        next_id[int(tree)] = max(next_id.get(int(tree), 0), int(node) + 1)
    added: list[tuple] = []  # (tree, node id, feature, true, false, threshold)
    for i, mode in enumerate(list(trees.modes)):
        if mode == "LEAF" or mode == "BRANCH_LEQ":
            continue
        if mode in ("BRANCH_GT", "BRANCH_GTE", "BRANCH_NEQ"):  # the negation of LEQ, LT, EQ
            trees.trues[i], trees.falses[i] = trees.falses[i], trees.trues[i]
            # A missing value fails > and >= (its branch is the flag's) but passes != (always the true branch)
            trees.missing[i] = 0 if mode == "BRANCH_NEQ" else 1 - (trees.missing[i] != 0)
            mode = {"BRANCH_GT": "BRANCH_LEQ", "BRANCH_GTE": "BRANCH_LT", "BRANCH_NEQ": "BRANCH_EQ"}[mode]
        threshold = float(trees.values[i])
        if mode == "BRANCH_LT":
            trees.values[i] = _just_below(threshold, dtype)
        elif mode == "BRANCH_EQ":  # x <= t ? (x <= below(t) ? false : true) : false
            tree = int(trees.tree_ids[i])
            below = next_id[tree]
            next_id[tree] += 1
            added.append((tree, below, int(trees.features[i]), int(trees.falses[i]), int(trees.trues[i]),
                          _just_below(threshold, dtype)))
            trees.trues[i] = below
        trees.modes[i] = "BRANCH_LEQ"
    if added:
        tree, node, feature, true, false, threshold = (np.asarray(c) for c in zip(*added))
        trees.tree_ids, trees.node_ids = np.concatenate([trees.tree_ids, tree]), np.concatenate([trees.node_ids, node])
        trees.features = np.concatenate([trees.features, feature])
        trees.trues, trees.falses = np.concatenate([trees.trues, true]), np.concatenate([trees.falses, false])
        trees.values = np.concatenate([trees.values, threshold.astype(dtype)])
        trees.missing = np.concatenate([trees.missing, np.zeros(len(added), np.int64)])
        trees.modes += ["BRANCH_LEQ"] * len(added)
    return trees


def pack_trees(ctx: ConvertContext, trees: TreeNodes, targets: int, dtype: str, prefix: str = "target",
               partial_targets: bool = False) -> TreeTables:
    """An ensemble's nodes as flat tables; `partial_targets`: a target may get a weight from some leaves of a
    tree only (the others add nothing, as with SUM and AVERAGE), otherwise that is refused."""
    count = len(trees.node_ids)
    if count == 0 or any(len(a) != count for a in (trees.tree_ids, trees.features, trees.trues, trees.falses,
                                                   trees.modes, trees.values, trees.missing)):
        ctx.fail("the nodes_* attributes must be non-empty and of one length")
    unknown = sorted({m for m in trees.modes if m != "LEAF" and m not in _MODES})
    if unknown:
        ctx.fail(f"unknown nodes_modes {unknown}")
    if len({m for m in trees.modes if m != "LEAF"}) > 1:
        trees = as_less_equal(trees, dtype)
    tree_ids, node_ids, features, trues, falses = trees.tree_ids, trees.node_ids, trees.features, trees.trues, \
        trees.falses
    modes, values, missing = trees.modes, trees.values, trees.missing
    count = len(node_ids)
    branch_modes = sorted({m for m in modes if m != "LEAF"})
    w_trees, w_nodes, w_ids, weights = trees.weight_trees, trees.weight_nodes, trees.weight_targets, trees.weights

    tree_rank = {int(t): r for r, t in enumerate(dict.fromkeys(tree_ids.tolist()))}
    order = sorted(range(count), key=lambda i: (tree_rank[int(tree_ids[i])], node_ids[i]))
    index = {(int(tree_ids[i]), int(node_ids[i])): k for k, i in enumerate(order)}
    if len(index) != count:
        ctx.fail("two nodes share one (tree id, node id)")
    feature = np.zeros(count, np.int32)
    left, right = np.arange(count, dtype=np.int32), np.arange(count, dtype=np.int32)
    threshold = np.zeros(count, dtype)
    nan_true = np.zeros(count, np.uint8)
    width_features = ctx.shape(0)[-1]
    children: dict[int, list[int]] = defaultdict(list)
    for k, i in enumerate(order):
        if modes[i] == "LEAF":
            continue
        tree = int(tree_ids[i])
        try:
            left[k], right[k] = index[(tree, int(trues[i]))], index[(tree, int(falses[i]))]
        except KeyError:
            ctx.fail(f"tree {tree} node {node_ids[i]} points to a node that does not exist")
        if not 0 <= features[i] < width_features:
            ctx.fail(f"tree {tree} node {node_ids[i]} reads feature {features[i]} of {width_features}")
        feature[k], threshold[k], nan_true[k] = features[i], values[i], 1 if missing[i] else 0
        children[k] += [int(left[k]), int(right[k])]

    trees = list(tree_rank)
    nodes_of: dict[int, list[int]] = defaultdict(list)
    for k, i in enumerate(order):
        nodes_of[int(tree_ids[i])].append(k)
    referenced = {c for kids in children.values() for c in kids}
    roots, depths, leaves_of = [], [], {}
    for tree in trees:
        candidates = [k for k in nodes_of[tree] if k not in referenced]
        if len(candidates) != 1:
            ctx.fail(f"tree {tree} has {len(candidates)} root nodes, expected one")
        depth, leaves, frontier = 0, [], [(candidates[0], 0)]
        while frontier:
            node, level = frontier.pop()
            if level > len(nodes_of[tree]):
                ctx.fail(f"tree {tree} has a cycle")
            if node in children:
                frontier += [(c, level + 1) for c in children[node]]
            else:
                leaves.append(node)
                depth = max(depth, level)
        roots.append(candidates[0])
        depths.append(depth)
        leaves_of[tree] = set(leaves)

    if not len(w_trees) == len(w_nodes) == len(w_ids) == len(weights):
        ctx.fail(f"the {prefix}_* attributes must be of one length")
    if len(w_ids) and not (0 <= w_ids.min() and w_ids.max() < targets):
        ctx.fail(f"{prefix}_ids must lie in [0, {targets})")
    spans: dict[int, list[int]] = {}
    holders: dict[int, set] = defaultdict(set)  # target -> leaves that hold a weight for it
    for tree, node, target in zip(w_trees, w_nodes, w_ids):
        if (int(tree), int(node)) not in index:
            ctx.fail(f"a {prefix} weight names tree {tree} node {node}, which does not exist")
        lo, hi = spans.get(int(tree), (int(target), int(target)))
        spans[int(tree)] = [min(lo, int(target)), max(hi, int(target))]
        holders[int(target)].add(index[(int(tree), int(node))])
    width = max([hi - lo + 1 for lo, hi in spans.values()] or [1])
    offsets = np.array([min(spans.get(t, (0, 0))[0], targets - width) for t in trees], np.int32)
    leaf_weights = np.zeros((count, width), dtype)
    offset_of = dict(zip(trees, offsets))
    for tree, node, target, weight in zip(w_trees, w_nodes, w_ids, weights):
        leaf_weights[index[(int(tree), int(node))], int(target) - offset_of[int(tree)]] += weight

    scored = np.zeros(targets, bool)
    all_leaves = set().union(*leaves_of.values())
    for target in range(targets):
        always = any(leaves_of[t] <= holders[target] for t in trees)
        sometimes = bool(holders[target] & all_leaves)
        if sometimes and not always and not partial_targets:
            ctx.unsupported(f"{prefix} {target} gets a weight from some leaves of a tree only")
        scored[target] = always
    return TreeTables(node_table(feature, threshold, left, right), leaf_weights, np.asarray(roots, np.int32),
                      np.asarray(depths, np.int32), offsets, nan_true if nan_true.any() else None,
                      _MODES[branch_modes[0]] if branch_modes else "leq", scored,
                      bool((weights >= 0).all()), frozenset(int(t) for t in w_ids))


def _rows(ctx: ConvertContext) -> tuple[str, str]:
    """X as (rows, features) in the dtype the trees compare in (float64 stays, other inputs become float32)."""
    x = ctx.input(0)
    t = ctx.type_of(0)
    if t.rank != 2:
        ctx.fail(f"expects X of shape (rows, features), got {t}")
    if t.dtype not in ("float32", "float64", "int64", "int32"):
        ctx.fail(f"X has dtype {t.dtype}; tree ensembles take float, double, int64 or int32")
    dtype = "float64" if t.dtype == "float64" else "float32"
    return (x if t.dtype == dtype else ctx.emit1("Cast", [x], to=dtype)), dtype


def ensemble_scores(ctx: ConvertContext, x: str, tables: TreeTables, targets: int, aggregate: str) -> str:
    inputs = [x] + [ctx.const(getattr(tables, name)) for name in TREE_TABLES]
    if tables.nan_goes_true is not None:
        inputs.append(ctx.const(tables.nan_goes_true))
    return ctx.emit1("TreeEnsemble", inputs, n_targets=targets, mode=tables.mode, aggregate=aggregate,
                     mean_depth=int(round(float(tables.depths.mean()))))


def post_transform(ctx: ConvertContext) -> str:
    transform = str(ctx.attr("post_transform", "NONE"))
    if transform not in _TRANSFORMS:
        ctx.unsupported(f"post_transform {transform} (Kiln compiles {', '.join(_TRANSFORMS)})")
    return transform


def transformed(ctx: ConvertContext, scores: str, transform: str) -> str:
    if transform == "LOGISTIC":
        return ctx.emit1("Sigmoid", [scores])
    if transform == "SOFTMAX":
        return ctx.emit1("Softmax", [scores], axis=1)
    return scores


def as_float32(ctx: ConvertContext, value: str) -> str:
    return value if ctx.builder.type_of(value).dtype == "float32" else ctx.emit1("Cast", [value], to="float32")


def _column(ctx: ConvertContext, value: str, column: int) -> str:
    rows = ctx.builder.type_of(value).shape[0]
    return ctx.emit1("Slice", [value], starts=(0, column), steps=(1, 1), sizes=(rows, 1))


@converter("TreeEnsembleRegressor", since_version=1, domain=ML)
def tree_ensemble_regressor(ctx: ConvertContext) -> str:
    x, dtype = _rows(ctx)
    targets = int(ctx.attr("n_targets", 1))
    aggregate = str(ctx.attr("aggregate_function", "SUM")).lower()
    transform = post_transform(ctx)
    tables = pack_trees(ctx, node_attributes(ctx, "target", dtype), targets, dtype)
    if aggregate in ("min", "max") and not tables.scored.all():
        ctx.unsupported(f"aggregate_function {aggregate.upper()} with targets that some trees do not score")
    scores = ensemble_scores(ctx, x, tables, targets, aggregate)
    base = _floats(ctx, "base_values", dtype)
    if base is not None and base.size:
        if base.size != targets:
            ctx.fail(f"base_values has {base.size} values for {targets} targets")
        scores = ctx.emit1("Add", [scores, ctx.const(base.reshape(1, targets))])
    return transformed(ctx, as_float32(ctx, scores), transform)


@converter("TreeEnsembleClassifier", since_version=1, domain=ML)
def tree_ensemble_classifier(ctx: ConvertContext) -> list[str]:
    if ctx.attr("classlabels_strings"):
        ctx.unsupported("string class labels (Kiln's outputs are numeric tensors: export with integer labels)")
    labels = int_attr(ctx, "classlabels_int64s")
    classes = labels.size
    if classes < 2:
        ctx.fail("needs at least two classlabels_int64s")
    x, dtype = _rows(ctx)
    transform = post_transform(ctx)
    tables = pack_trees(ctx, node_attributes(ctx, "class", dtype), classes, dtype, "class")
    raw = ensemble_scores(ctx, x, tables, classes, "sum")
    base = _floats(ctx, "base_values", dtype)
    base = np.zeros(0, dtype) if base is None else base
    if classes > 2:
        return _multiclass(ctx, raw, tables, labels, base, transform)
    return _binary(ctx, raw, tables, labels, base, transform)


def _multiclass(ctx: ConvertContext, raw: str, tables: TreeTables, labels: np.ndarray, base: np.ndarray,
                transform: str) -> list[str]:
    classes = labels.size
    scored = tables.scored.copy()
    if base.size:
        if base.size != classes:
            ctx.fail(f"base_values has {base.size} values for {classes} classes")
        raw = ctx.emit1("Add", [raw, ctx.const(base.reshape(1, classes))])
        scored[:] = True
    ranked = raw
    if not scored.all():  # ONNX Runtime's label skips classes no tree (nor base value) scores
        mask = np.where(scored, 0.0, -np.inf).astype(ctx.builder.type_of(raw).dtype)
        ranked = ctx.emit1("Add", [raw, ctx.const(mask.reshape(1, classes))])
    best = ctx.emit1("ArgMax", [ranked], axis=1, keepdims=0, select_last_index=0)
    label = ctx.emit1("Gather", [ctx.const(labels), best], axis=0)
    return [label, transformed(ctx, as_float32(ctx, raw), transform)]


def _binary(ctx: ConvertContext, raw: str, tables: TreeTables, labels: np.ndarray, base: np.ndarray,
            transform: str) -> list[str]:
    """Two classes, following ONNX Runtime's TreeAggregatorClassifier: which slot holds the positive score
    depends on the base values and on which classes the trees score."""
    dtype = ctx.builder.type_of(raw).dtype
    s0, s1 = _column(ctx, raw, 0), _column(ctx, raw, 1)
    has0, has1 = bool(tables.scored[0]), bool(tables.scored[1])
    binary_case = len(tables.used_targets) == 1

    def plus(value: str, amount: float) -> str:
        return ctx.emit1("Add", [value, ctx.const(np.asarray(amount, dtype))])

    if base.size == 2:
        if has1:
            s1 = plus(s0, float(base[1]))
            s0 = ctx.emit1("Neg", [s1])
        else:  # "binary as multiclass": the scores move, which classes count as scored does not
            s0, s1 = plus(s0, float(base[0])), plus(s1, float(base[1]))
        pair = True
    elif base.size == 1:
        s0 = plus(s0, float(base[0]))
        pair = has1
    elif base.size == 0:
        pair = has1
    else:
        ctx.fail(f"base_values has {base.size} values for 2 classes")
    positive = s1 if pair and has1 else s0 if has0 else ctx.const(np.zeros((1, 1), dtype))
    cut = 0.5 if binary_case and tables.all_weights_positive else 0.0
    labels_taken = (labels[1], labels[0]) if binary_case else (1, 0)  # ORT's positive/negative defaults otherwise
    win = ctx.emit1("Greater", [positive, ctx.const(np.asarray(cut, dtype))])
    label = ctx.emit1("Where", [win, ctx.const(np.asarray(labels_taken[0], np.int64)),
                                ctx.const(np.asarray(labels_taken[1], np.int64))])
    rows = ctx.builder.type_of(raw).shape[0]
    label = ctx.reshape(label, (rows,)) if ctx.builder.type_of(label).shape != (rows,) else label
    if pair:  # ONNX Runtime writes 0 for a class no tree scores, whatever base value it got
        s0, s1 = (s if scored else ctx.const(np.zeros((rows, 1), dtype)) for s, scored in ((s0, has0), (s1, has1)))
        scores = transformed(ctx, ctx.emit1("Concat", [s0, s1], axis=1), transform)
    elif binary_case and tables.all_weights_positive:  # one probability: the other class gets its complement
        scores = ctx.emit1("Concat", [ctx.emit1("Sub", [ctx.const(np.ones((1, 1), dtype)), s0]), s0], axis=1)
    elif transform == "LOGISTIC":
        scores = ctx.emit1("Sigmoid", [ctx.emit1("Concat", [ctx.emit1("Neg", [s0]), s0], axis=1)])
    else:
        scores = ctx.emit1("Concat", [ctx.emit1("Neg", [s0]), s0], axis=1)
    return [label, as_float32(ctx, scores)]


@converter("ZipMap", since_version=1, domain=ML)
def zip_map(ctx: ConvertContext) -> str:
    ctx.unsupported("ZipMap outputs a sequence of maps, which a compiled model does not return: export the model "
                    "with zipmap disabled (skl2onnx: to_onnx(model, X, options={'zipmap': False}); onnxmltools: "
                    "zipmap=False) to get the probabilities as one tensor")
