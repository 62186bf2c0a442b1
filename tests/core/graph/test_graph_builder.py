"""GraphBuilder: type inference per node, eager constant folding, naming, renaming and build()."""
from __future__ import annotations

import numpy as np
import pytest

from core.errors import ShapeError
from core.graph.builder import GraphBuilder
from core.graph.interpret import evaluate
from core.graph.ir import TensorType

F32 = TensorType((2, 3), "float32")


def test_nodes_get_inferred_types_and_fresh_names():
    b = GraphBuilder("g")
    x = b.add_input("x", F32)
    (y,) = b.add_node("Relu", [x], name_hint="act")
    (z,) = b.add_node("Relu", [y], name_hint="act")
    assert (y, z) == ("act", "act_1")
    assert b.type_of(z) == F32
    b.set_outputs([z])
    graph = b.build()
    assert [n.op for n in graph.nodes] == ["Relu", "Relu"] and graph.outputs == ("act_1",)


def test_all_constant_inputs_fold_eagerly():
    b = GraphBuilder()
    x = b.add_input("x", TensorType((4,), "int64"))
    shape = b.add_constant(np.array([2, 3, 4], np.int64), "shape")
    index = b.add_constant(np.array(1, np.int64), "index")
    (dim,) = b.add_node("Gather", [shape, index], axis=0)
    (doubled,) = b.add_node("Mul", [dim, b.add_constant(np.array(2, np.int64))])
    assert b.constant_value(doubled).item() == 6 and not b.is_node_output(doubled)
    (y,) = b.add_node("Add", [x, doubled])
    b.set_outputs([y])
    graph = b.build()
    assert [n.op for n in graph.nodes] == ["Add"]
    assert set(graph.constants) == {doubled}  # intermediate constants are dropped from the graph
    np.testing.assert_array_equal(evaluate(graph, {"x": np.arange(4)})[y], np.arange(4) + 6)


def test_constants_are_read_only_copies():
    source = np.ones((2, 2), np.float32)
    b = GraphBuilder()
    name = b.add_constant(source)
    source[0, 0] = 5
    value = b.constant_value(name)
    assert value[0, 0] == 1 and not value.flags.writeable
    with pytest.raises(ValueError):
        value[0, 0] = 3


def test_type_errors_name_the_op():
    b = GraphBuilder()
    x = b.add_input("x", F32)
    y = b.add_input("y", TensorType((4,), "float32"))
    with pytest.raises(ShapeError, match="Add: shapes .* do not broadcast"):
        b.add_node("Add", [x, y])
    with pytest.raises(ShapeError, match="not defined"):
        b.add_node("Relu", ["nope"])


def test_unknown_op_is_rejected():
    b = GraphBuilder()
    x = b.add_input("x", F32)
    with pytest.raises(KeyError, match="no graph op"):
        b.add_node("Frobnicate", [x])


def test_rename_and_identity_outputs():
    b = GraphBuilder()
    b.reserve_names(["out"])
    x = b.add_input("x", F32)
    (y,) = b.add_node("Relu", [x], name_hint="out")
    assert y != "out"
    (z,) = b.add_node("Neg", [y])
    assert b.rename_value(y, "out") == "out"
    constant = b.add_constant(np.zeros((2, 3), np.float32), "zeros")
    alias = b.add_identity(constant, "zeros_out")
    b.set_outputs(["out", z, alias])
    graph = b.build()
    assert graph.nodes[1].inputs == ("out",)
    result = evaluate(graph, {"x": np.full((2, 3), -1.0, np.float32)})
    np.testing.assert_array_equal(result["zeros_out"], 0)
    np.testing.assert_array_equal(result[z], 0)
    with pytest.raises(ShapeError, match="only node outputs"):
        b.rename_value(constant, "other")


def test_trailing_absent_inputs_are_dropped():
    b = GraphBuilder()
    x = b.add_input("x", TensorType((1, 2, 5, 5), "float32"))
    w = b.add_constant(np.ones((3, 2, 3, 3), np.float32))
    (y,) = b.add_node("Conv", [x, w, ""], strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1], group=1)
    b.set_outputs([y])
    node = b.build().nodes[0]
    assert node.inputs == (x, w) and node.attr("strides") == (1, 1)


def test_build_requires_outputs():
    with pytest.raises(ShapeError, match="outputs"):
        GraphBuilder().build()
