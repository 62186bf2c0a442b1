"""The reference interpreter checks its feeds and runs nodes in order with the ops' folds."""
from __future__ import annotations

import numpy as np
import pytest

from core.errors import ShapeError
from core.graph.builder import GraphBuilder
from core.graph.interpret import evaluate
from core.graph.ir import TensorType


def _softmax_graph():
    b = GraphBuilder()
    x = b.add_input("x", TensorType((2, 3), "float32"))
    (y,) = b.add_node("Softmax", [x], axis=1)
    b.set_outputs([y])
    return b.build(), y


def test_evaluate_runs_the_graph():
    graph, y = _softmax_graph()
    x = np.array([[0, 1, 2], [3, 3, 3]], np.float32)
    out = evaluate(graph, {"x": x})[y]
    expected = np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    assert out.dtype == np.float32


@pytest.mark.parametrize("feeds,match", [({}, "missing"), ({"x": np.zeros((2, 3), np.float64)}, "expected"),
                                         ({"x": np.zeros((3, 2), np.float32)}, "expected"),
                                         ({"x": np.zeros((2, 3), np.float32), "z": np.zeros(1)}, "unknown")])
def test_evaluate_checks_feeds(feeds, match):
    graph, _ = _softmax_graph()
    with pytest.raises(ShapeError, match=match):
        evaluate(graph, feeds)
