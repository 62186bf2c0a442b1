"""The compiled TreeEnsemble kernel against its numpy reference: random unbalanced trees, every branch mode
and aggregate, missing values, float64, and both layouts (one row per walk, interleaved row blocks) with the
trees split across chunks or not, the branchy walk, chunk slots a layout leaves unused; everything in one library
build."""
from __future__ import annotations

import numpy as np
import pytest

from core.graph.op_defs.ml import node_table, tree_ensemble_fold
from tests.helpers.kernel_runs import OpKernel, build_kernels
from core.kernels.tree_ensemble import BRANCH_FREE, BRANCHY, TreeLayout, chunk_slots, tree_layout


def random_trees(rng: np.random.Generator, trees: int, max_depth: int, features: int, targets: int, width: int,
                 dtype: str = "float32") -> list[np.ndarray]:
    """Node and tree tables (core/graph/op_defs/ml.py) of `trees` random trees, leaves pointing to themselves."""
    feature, threshold, left, right, roots, depths = [], [], [], [], [], []

    def grow(depth: int) -> tuple[int, int]:
        node = len(feature)
        feature.append(0), threshold.append(0.0), left.append(node), right.append(node)
        if depth == max_depth or (depth > 0 and rng.random() < 0.25):
            return node, 0
        feature[node], threshold[node] = int(rng.integers(features)), float(rng.choice([-0.5, 0.0, 0.25, 1.0]))
        (left[node], dl), (right[node], dr) = grow(depth + 1), grow(depth + 1)
        return node, 1 + max(dl, dr)

    for _ in range(trees):
        root, depth = grow(0)
        roots.append(root), depths.append(depth)
    count = len(feature)
    leaf = rng.standard_normal((count, width)).astype(dtype)
    offsets = rng.integers(0, targets - width + 1, trees)
    nodes = node_table(np.asarray(feature), np.asarray(threshold, dtype), np.asarray(left), np.asarray(right))
    return [nodes, leaf, np.asarray(roots, np.int32), np.asarray(depths, np.int32), np.asarray(offsets, np.int32)]


def _rows(rng: np.random.Generator, rows: int, features: int, dtype: str, holes: bool) -> np.ndarray:
    x = rng.choice([-1.0, -0.5, 0.0, 0.25, 0.6, 1.0], size=(rows, features)).astype(dtype)  # exact ties too
    if holes:
        x[rng.random(x.shape) < 0.1] = np.nan
    return x


CASES = [  # (name, rows, trees, depth, features, targets, width, mode, aggregate, dtype, holes, layout)
    ("per_row", 37, 9, 5, 6, 3, 3, "leq", "sum", "float32", False, (1, 1, 1)),
    ("interleaved_partial_block", 37, 9, 5, 6, 3, 3, "leq", "sum", "float32", False, (8, 1, 1)),
    ("tree_chunks", 3, 23, 6, 4, 2, 1, "lt", "sum", "float32", False, (1, 1, 5)),
    ("trees_together_partial_group", 2, 23, 6, 4, 3, 2, "leq", "sum", "float32", False, (1, 4, 1)),
    ("trees_together_chunks", 5, 37, 7, 4, 1, 1, "leq", "sum", "float32", True, (1, 8, 3)),
    ("rows_and_trees_chunks", 21, 11, 4, 5, 4, 2, "gte", "average", "float32", False, (4, 2, 3)),
    ("missing_values", 33, 7, 6, 5, 1, 1, "gt", "sum", "float32", True, None),
    ("min", 19, 6, 4, 3, 2, 2, "eq", "min", "float32", False, (2, 2, 2)),
    ("max", 19, 6, 4, 3, 2, 2, "neq", "max", "float32", True, (1, 3, 3)),
    ("float64", 300, 12, 7, 8, 3, 1, "leq", "sum", "float64", True, None),
    ("branchy_per_row", 37, 9, 5, 6, 3, 3, "leq", "sum", "float32", False, (1, 1, 1, BRANCHY)),
    ("branchy_rows_chunks_missing", 21, 23, 6, 5, 4, 2, "lt", "sum", "float32", True, (4, 1, 3, BRANCHY)),
    ("branchy_average", 19, 11, 4, 3, 2, 2, "gte", "average", "float32", False, (2, 8, 2, BRANCHY)),
    ("branchy_min_max_float64", 19, 6, 7, 3, 2, 2, "neq", "max", "float64", True, (3, 1, 1, BRANCHY)),
    ("unused_chunk_slots", 3, 40, 5, 4, 1, 1, "leq", "min", "float32", False, None),  # 1 chunk of 3 slots
]


@pytest.fixture(scope="module")
def runs():
    kernels, expected = [], {}
    rng = np.random.default_rng(7)
    for name, rows, trees, depth, features, targets, width, mode, aggregate, dtype, holes, layout in CASES:
        tables = random_trees(rng, trees, depth, features, targets, width, dtype)
        inputs = [_rows(rng, rows, features, dtype, holes)] + tables
        if holes:
            inputs.append((rng.random(tables[0].shape[0]) < 0.5).astype(np.uint8))
        attrs = dict(n_targets=targets, mode=mode, aggregate=aggregate)
        expected[name] = tree_ensemble_fold(inputs, attrs)[0]
        if layout is not None:
            attrs.update(rows_per_block=layout[0], trees_per_step=layout[1], tree_chunks=layout[2],
                         tree_walk=layout[3] if len(layout) > 3 else BRANCH_FREE)
        kernels.append(OpKernel(name, "TreeEnsemble", inputs, attrs))
    return {run.kernel.name: (run.run()[0], expected[run.kernel.name]) for run in build_kernels(kernels)}


@pytest.mark.parametrize("name", [case[0] for case in CASES])
def test_kernel_matches_reference(runs, name):
    got, want = runs[name]
    tolerance = 1e-12 if got.dtype == np.float64 else 1e-5
    np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("name", ["per_row", "interleaved_partial_block", "branchy_per_row", "float64"])
def test_one_chunk_adds_leaves_in_tree_order(runs, name):
    got, want = runs[name]  # the reference's order: the same bits, whichever walk reached the leaves
    np.testing.assert_array_equal(got, want)


def test_layout_interleaves_rows_when_many_and_trees_when_few():
    assert tree_layout(1024, 500) == TreeLayout(8, 1, 1)
    assert tree_layout(1, 500) == TreeLayout(1, 16, 1)  # too little work for threads
    assert tree_layout(2, 50_000) == TreeLayout(1, 16, 8)
    assert tree_layout(4, 3) == TreeLayout(1, 16, 1)


def test_chunk_slots_hold_the_heuristic_chunks():
    for rows, trees in [(1, 500), (2, 50_000), (4, 3), (127, 1000), (1024, 500), (3, 40)]:
        assert 1 <= tree_layout(rows, trees).chunks <= chunk_slots(rows, trees)
    assert chunk_slots(3, 40) == 3 and chunk_slots(1024, 500) == 1
