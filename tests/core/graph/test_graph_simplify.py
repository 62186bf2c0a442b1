"""simplify (Identity/no-op removal, Reshape chains, Transpose pairs, small integer powers) and CSE on small graphs."""
from __future__ import annotations

import numpy as np
import pytest

from core.graph.builder import GraphBuilder
from core.graph.ir import Graph, Node, TensorType
from core.graph.passes import eliminate_common_subexpressions, eliminate_dead_code, simplify
from tests.helpers.graphs import F32, assert_same_meaning, ops


def _chain(nodes, types, outputs=("y",), constants=None) -> Graph:
    full = {k: TensorType(v, F32) for k, v in types.items()}
    return Graph(("x",), outputs, nodes, full, constants or {}, "hand")


def test_identity_nodes_are_removed_but_outputs_stay_node_produced():
    graph = _chain([Node("Identity", ("x",), ("a",)), Node("Relu", ("a",), ("b",)), Node("Identity", ("b",), ("y",))],
                   {"x": (2, 3), "a": (2, 3), "b": (2, 3), "y": (2, 3)})
    after = eliminate_dead_code(simplify(graph))
    assert ops(after) == ["Relu", "Identity"]
    assert after.nodes[0].inputs == ("x",)
    assert_same_meaning(graph, after)


def test_reshape_chains_merge_into_one_reshape():
    # Flatten, Squeeze and Unsqueeze import as Reshape: x[2,3,4] -> [6,4] -> [24] -> [1,24] -> [4,6]
    nodes = [Node("Reshape", ("x",), ("a",), {"shape": (6, 4)}), Node("Reshape", ("a",), ("b",), {"shape": (24,)}),
             Node("Reshape", ("b",), ("c",), {"shape": (1, 24)}), Node("Reshape", ("c",), ("d",), {"shape": (4, 6)}),
             Node("Exp", ("d",), ("y",))]
    graph = _chain(nodes, {"x": (2, 3, 4), "a": (6, 4), "b": (24,), "c": (1, 24), "d": (4, 6), "y": (4, 6)})
    after = eliminate_dead_code(simplify(graph))
    assert ops(after) == ["Reshape", "Exp"]
    assert after.nodes[0].inputs == ("x",) and after.nodes[0].attr("shape") == (4, 6)
    assert_same_meaning(graph, after)


def test_reshape_back_to_the_input_shape_vanishes():
    nodes = [Node("Reshape", ("x",), ("a",), {"shape": (6,)}), Node("Reshape", ("a",), ("b",), {"shape": (2, 3)}),
             Node("Neg", ("b",), ("y",))]
    after = eliminate_dead_code(simplify(_chain(nodes, {"x": (2, 3), "a": (6,), "b": (2, 3), "y": (2, 3)})))
    assert ops(after) == ["Neg"] and after.nodes[0].inputs == ("x",)


def test_transpose_pairs_cancel_or_compose():
    cancel = [Node("Transpose", ("x",), ("a",), {"perm": (0, 2, 1)}),
              Node("Transpose", ("a",), ("b",), {"perm": (0, 2, 1)}), Node("Relu", ("b",), ("y",))]
    graph = _chain(cancel, {"x": (2, 3, 4), "a": (2, 4, 3), "b": (2, 3, 4), "y": (2, 3, 4)})
    after = eliminate_dead_code(simplify(graph))
    assert ops(after) == ["Relu"] and after.nodes[0].inputs == ("x",)
    compose = [Node("Transpose", ("x",), ("a",), {"perm": (1, 2, 0)}),
               Node("Transpose", ("a",), ("b",), {"perm": (0, 2, 1)}), Node("Relu", ("b",), ("y",))]
    graph = _chain(compose, {"x": (2, 3, 4), "a": (3, 4, 2), "b": (3, 2, 4), "y": (3, 2, 4)})
    after = eliminate_dead_code(simplify(graph))
    assert ops(after) == ["Transpose", "Relu"] and after.nodes[0].attr("perm") == (1, 0, 2)
    assert_same_meaning(graph, after)


def test_a_transpose_pair_producing_a_graph_output_keeps_a_node():
    nodes = [Node("Transpose", ("x",), ("a",), {"perm": (1, 0)}), Node("Transpose", ("a",), ("y",), {"perm": (1, 0)})]
    after = eliminate_dead_code(simplify(_chain(nodes, {"x": (2, 3), "a": (3, 2), "y": (2, 3)})))
    assert after.outputs == ("y",) and any("y" in n.outputs for n in after.nodes)


def test_cse_merges_repeated_nodes_and_equal_constants():
    b = GraphBuilder("cse")
    x = b.add_input("x", TensorType((4,), F32))
    c1 = b.add_constant(np.full(4, 2.0, np.float32), "c")
    c2 = b.add_constant(np.full(4, 2.0, np.float32), "c")
    (m1,) = b.add_node("Mul", [x, c1])
    (m2,) = b.add_node("Mul", [x, c2])  # same as m1 once the constants are one
    (e1,) = b.add_node("Exp", [m1])
    (e2,) = b.add_node("Exp", [m2])
    (t1,) = b.add_node("Transpose", [x], perm=(0,))
    (y,) = b.add_node("Add", [e1, e2])
    b.set_outputs([y, t1])
    graph = b.build()
    after = eliminate_dead_code(eliminate_common_subexpressions(graph))
    assert ops(after) == ["Mul", "Exp", "Transpose", "Add"]
    add = after.nodes[-1]
    assert add.inputs[0] == add.inputs[1]
    assert len(after.constants) == 1
    assert_same_meaning(graph, after)


def test_cse_keeps_attributes_apart_and_graph_outputs_produced():
    nodes = [Node("Transpose", ("x",), ("a",), {"perm": (1, 0)}), Node("Transpose", ("x",), ("y",), {"perm": (1, 0)}),
             Node("Clip", ("x",), ("c1",), {"min": 0.0, "max": 1.0}), Node("Clip", ("x",), ("c2",), {"min": 0.0, "max": 2.0}),
             Node("Add", ("c1", "c2"), ("z",))]
    types = {"x": (3, 3), "a": (3, 3), "y": (3, 3), "c1": (3, 3), "c2": (3, 3), "z": (3, 3)}
    graph = Graph(("x",), ("a", "y", "z"), nodes, {k: TensorType(v, F32) for k, v in types.items()}, {})
    after = eliminate_common_subexpressions(graph)
    assert ops(after) == ops(graph)  # y is a graph output; the Clips differ in max


def test_pow_by_a_constant_two_becomes_a_multiply_and_by_one_vanishes():
    def graph_with(exponent, dtype=F32):
        types = {"x": TensorType((2, 5), dtype), "p": TensorType((2, 5), dtype), "y": TensorType((2, 5), dtype),
                 "e": TensorType(np.shape(exponent), dtype)}
        nodes = [Node("Pow", ("x", "e"), ("p",)), Node("Neg", ("p",), ("y",))]
        return Graph(("x",), ("y",), nodes, types, {"e": np.asarray(exponent, dtype)}, "hand")

    square = graph_with(np.float32(2.0))
    after = eliminate_dead_code(simplify(square))
    assert ops(after) == ["Mul", "Neg"] and after.nodes[0].inputs == ("x", "x")
    assert_same_meaning(square, after)
    after = eliminate_dead_code(simplify(graph_with(np.ones((1, 1), np.float32))))
    assert ops(after) == ["Neg"] and after.nodes[0].inputs == ("x",)
    for kept in (np.float32(5.0), np.float32(0.5), np.float32(-0.5), np.float32(0.0),
                 np.float32([2.0, 2.0, 2.0, 2.0, 2.0])):
        assert ops(simplify(graph_with(kept))) == ["Pow", "Neg"]
    assert ops(simplify(graph_with(np.int32(3), "int32"))) == ["Pow", "Neg"]  # integer pow stays exact


def _pow_graph(exponent: float, dtype: str = F32, output_is_pow: bool = False) -> Graph:
    types = {"x": TensorType((3, 7), dtype), "p": TensorType((3, 7), dtype), "y": TensorType((3, 7), dtype),
             "e": TensorType((), F32)}
    nodes = [Node("Pow", ("x", "e"), ("p",), name="gelu/pow")]
    nodes += [] if output_is_pow else [Node("Neg", ("p",), ("y",))]
    return Graph(("x",), ("p",) if output_is_pow else ("y",), nodes, types, {"e": np.float32(exponent)}, "hand")


@pytest.mark.parametrize("exponent,shape", [
    (3.0, [("Mul", ("x", "x")), ("Mul", ("p.square", "x"))]),  # ONNX Runtime's x*x*x
    (4.0, [("Mul", ("x", "x")), ("Mul", ("p.square", "p.square"))]),
    (-1.0, [("Reciprocal", ("x",))]),
    (-2.0, [("Mul", ("x", "x")), ("Reciprocal", ("p.square",))]),
    (-3.0, [("Mul", ("x", "x")), ("Mul", ("p.square", "x")), ("Reciprocal", ("p.pow",))]),
])
def test_pow_by_a_small_integer_becomes_multiplies(exponent, shape):
    graph = _pow_graph(exponent)
    after = eliminate_dead_code(simplify(graph))
    assert [(n.op, n.inputs) for n in after.nodes[:-1]] == shape
    assert after.nodes[-2].outputs == ("p",) and after.nodes[-2].name == "gelu/pow"
    for node in after.nodes:
        for value in node.outputs:
            assert after.type_of(value) == TensorType((3, 7), F32)
    assert_same_meaning(graph, after, rtol=1e-6, atol=0)
    # Each multiply rounds once: within 2 ulp of the exact power, over a wide range of magnitudes.
    x = np.geomspace(1e-6, 1e6, 7, dtype=np.float32) * np.float32([[1], [-1], [0.7]])
    from core.graph.interpret import evaluate
    got = evaluate(after, {"x": x})["y"]
    exact = -(x.astype(np.float64) ** exponent)
    finite = np.isfinite(exact.astype(np.float32)) & (np.abs(exact) > 1.2e-38)
    ulps = np.abs(got[finite] - exact[finite]) / np.spacing(np.abs(exact[finite]).astype(np.float32))
    assert ulps.max() <= 2.0


def test_pow_rewrite_keeps_a_graph_output_produced_and_special_values():
    graph = _pow_graph(3.0, output_is_pow=True)
    after = eliminate_dead_code(simplify(graph))
    assert ops(after) == ["Mul", "Mul"] and after.nodes[-1].outputs == ("p",)
    from core.graph.interpret import evaluate
    x = np.array([[0.0, -0.0, np.inf, -np.inf, np.nan, 2.0, -3.0]] * 3, np.float32)
    for exponent in (3.0, -1.0, -2.0, 4.0):
        g = _pow_graph(exponent, output_is_pow=True)
        with np.errstate(all="ignore"):
            want = np.power(x, np.float32(exponent))
            got = evaluate(eliminate_dead_code(simplify(g)), {"x": x})["p"]
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
