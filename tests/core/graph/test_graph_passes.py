"""fold_constants, eliminate_dead_code and the pass manager on small hand-built graphs."""
from __future__ import annotations

import numpy as np
import pytest

from core.debug import debug_level
from core.graph.interpret import evaluate
from core.graph.ir import Graph, Node, TensorType
from core.graph.passes import LEVELS, eliminate_dead_code, fold_constants, run_passes
from tests.backend_calls import optimize

F32 = "float32"


def _graph_with_foldable_nodes() -> Graph:
    # Built by hand (not with GraphBuilder, which would fold while building).
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.full((3,), 2.0, np.float32)
    nodes = [
        Node("Mul", ("a", "b"), ("ab",)),
        Node("Relu", ("ab",), ("ab_relu",)),
        Node("Add", ("x", "ab_relu"), ("sum",)),
        Node("Exp", ("x",), ("dead",)),
        Node("Neg", ("b",), ("negb",)),
    ]
    types = {"x": TensorType((2, 3), F32), "a": TensorType((2, 3), F32), "b": TensorType((3,), F32),
             "ab": TensorType((2, 3), F32), "ab_relu": TensorType((2, 3), F32), "sum": TensorType((2, 3), F32),
             "dead": TensorType((2, 3), F32), "negb": TensorType((3,), F32)}
    return Graph(("x",), ("sum", "negb"), nodes, types, {"a": a, "b": b}, "hand")


def test_fold_constants_evaluates_constant_nodes_and_keeps_outputs_node_produced():
    graph = _graph_with_foldable_nodes()
    folded = fold_constants(graph)
    assert [n.op for n in folded.nodes] == ["Add", "Exp", "Identity"]
    np.testing.assert_array_equal(folded.constants["ab_relu"], np.arange(6).reshape(2, 3) * 2.0)
    identity = folded.nodes[-1]
    assert identity.outputs == ("negb",)
    np.testing.assert_array_equal(folded.constants[identity.inputs[0]], -2.0)
    x = np.ones((2, 3), np.float32)
    for name, value in evaluate(graph, {"x": x}).items():
        np.testing.assert_array_equal(evaluate(folded, {"x": x})[name], value)
    assert fold_constants(folded).nodes == folded.nodes  # idempotent


def test_eliminate_dead_code_drops_unused_nodes_and_constants():
    graph = eliminate_dead_code(fold_constants(_graph_with_foldable_nodes()))
    assert [n.op for n in graph.nodes] == ["Add", "Identity"]
    assert set(graph.constants) == {"ab_relu", "negb_folded"}
    assert "dead" not in graph.types and "ab" not in graph.types and graph.inputs == ("x",)


def test_dce_keeps_unused_graph_inputs():
    types = {"x": TensorType((2,), F32), "unused": TensorType((2,), F32), "y": TensorType((2,), F32)}
    graph = Graph(("x", "unused"), ("y",), [Node("Relu", ("x",), ("y",))], types, {})
    assert eliminate_dead_code(graph).inputs == ("x", "unused")


def test_fold_skips_results_much_larger_than_inputs():
    types = {"c": TensorType((1,), F32), "big": TensorType((1024, 1024), F32), "y": TensorType((1024, 1024), F32),
             "x": TensorType((1024, 1024), F32)}
    nodes = [Node("Expand", ("c",), ("big",), {"shape": (1024, 1024)}), Node("Add", ("x", "big"), ("y",))]
    graph = Graph(("x",), ("y",), nodes, types, {"c": np.ones(1, np.float32)})
    assert [n.op for n in fold_constants(graph).nodes] == ["Expand", "Add"]


def test_optimize_runs_every_level(capsys):
    graph = _graph_with_foldable_nodes()
    with debug_level(0):
        assert optimize(graph, 0).nodes == graph.nodes  # O0 runs no pass
        for level in (1, 2, 3):
            assert [n.op for n in optimize(graph, level).nodes] == ["Add", "Identity"]
    assert capsys.readouterr().err == ""
    with pytest.raises(ValueError, match="opt_level"):
        optimize(graph, 7)
    assert set(LEVELS) == {0, 1, 2, 3}


def test_debug_2_prints_the_graph_after_each_pass(capsys):
    with debug_level(2):
        run_passes(_graph_with_foldable_nodes(), [("fold_constants", fold_constants), ("dce", eliminate_dead_code)])
    err = capsys.readouterr().err
    assert "// after fold_constants" in err and "// after dce" in err and "graph hand(" in err
