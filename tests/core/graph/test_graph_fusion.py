"""Post-dominator tree and operator fusion (TVM's rules) on small graphs, including the diamonds
where fusion must stop, and Fused nodes as one kernel each."""
from __future__ import annotations

import numpy as np
import pytest

from core.debug import debug_level
from core.graph.builder import GraphBuilder
from core.graph.ir import Graph, Node, TensorType
from core.graph.ops import Pattern
from core.graph.passes import fuse_ops, fusion_groups, run_passes
from core.graph.passes.dominators import forward_graph, post_dominators
from tests.helpers.graphs import F32, assert_same_meaning, conv, image_builder, ops


def _elementwise(nodes, outputs=("y",)) -> Graph:
    values = {v for n in nodes for v in n.inputs + n.outputs}
    return Graph(("x",), outputs, nodes, {v: TensorType((4, 4), F32) for v in values}, {}, "hand")


def _groups(graph: Graph) -> list[list[str]]:
    return [[graph.nodes[i].outputs[0] for i in g] for g in fusion_groups(graph)]


def test_post_dominators_of_a_diamond_and_a_chain():
    #   x -> a -> b -> d -> e (output)
    #          \-> c -/
    nodes = [Node("Exp", ("x",), ("a",)), Node("Neg", ("a",), ("b",)), Node("Abs", ("a",), ("c",)),
             Node("Add", ("b", "c"), ("d",)), Node("Relu", ("d",), ("e",))]
    tree = post_dominators(forward_graph(_elementwise(nodes, ("e",))))
    assert tree.parent == (3, 3, 3, 4, None)
    assert tree.pattern[0] == Pattern.ELEMWISE and tree.pattern[4] == Pattern.OPAQUE
    assert tree.depth == (3, 3, 3, 2, 1)


def test_a_value_read_outside_has_no_post_dominator():
    nodes = [Node("Exp", ("x",), ("a",)), Node("Neg", ("a",), ("b",)), Node("Abs", ("a",), ("c",))]
    tree = post_dominators(forward_graph(_elementwise(nodes, ("b", "c"))))
    assert tree.parent == (None, None, None)


def test_an_elementwise_diamond_fuses_into_one_group():
    nodes = [Node("Exp", ("x",), ("a",)), Node("Neg", ("a",), ("b",)), Node("Abs", ("a",), ("c",)),
             Node("Add", ("b", "c"), ("y",))]
    graph = _elementwise(nodes)
    assert _groups(graph) == [["a", "b", "c", "y"]]
    after = fuse_ops(graph)
    assert ops(after) == ["Fused"] and after.nodes[0].attr("ops") == ("Exp", "Neg", "Abs", "Add")
    assert after.nodes[0].inputs == ("x",) and after.nodes[0].outputs == ("y",)
    assert_same_meaning(graph, after)


def _conv_bias_relu() -> tuple[Graph, str]:
    b, x = image_builder()
    y = conv(b, x, 4, 4, seed=0, bias=False)
    (y,) = b.add_node("Add", [y, b.add_constant(np.ones((4, 1, 1), np.float32), "bias")])
    (y,) = b.add_node("Mul", [y, b.add_constant(np.full((4, 1, 1), 0.5, np.float32), "scale")])
    (y,) = b.add_node("Relu", [y])
    b.set_outputs([y])
    return b.build(), y


def test_conv_takes_its_elementwise_epilogue():
    graph, _ = _conv_bias_relu()
    after = fuse_ops(graph)
    assert ops(after) == ["Fused"] and after.nodes[0].attr("ops") == ("Conv", "Add", "Mul", "Relu")
    assert after.nodes[0].attr("pattern") == Pattern.OUT_ELEMWISE_FUSABLE
    assert_same_meaning(graph, after, rtol=1e-4, atol=1e-4)


def test_residual_block_fuses_conv_add_relu_and_stops_at_the_branch():
    # x -> conv1 -> relu1 -> conv2 -> add(relu1) -> relu2: relu1 feeds two branches, one through a
    # conv, so it stays with conv1; the residual Add and the last Relu join conv2.
    b, x = image_builder()
    c1 = conv(b, x, 4, 4, seed=1)
    (r1,) = b.add_node("Relu", [c1])
    c2 = conv(b, r1, 4, 4, seed=2)
    (s,) = b.add_node("Add", [c2, r1])
    (r2,) = b.add_node("Relu", [s])
    b.set_outputs([r2])
    graph = b.build()
    assert _groups(graph) == [[c1, r1], [c2, s, r2]]
    after = fuse_ops(graph)
    assert [n.attr("ops") for n in after.nodes] == [("Conv", "Relu"), ("Conv", "Add", "Relu")]
    assert_same_meaning(graph, after, rtol=1e-4, atol=1e-4)


def test_fusion_never_duplicates_a_value_read_by_two_convs():
    # relu -> conv_a -> add, relu -> conv_b -> add: relu's post-dominator is the add, but the paths
    # run through convs, so relu must not join the add (nor either conv).
    b, x = image_builder()
    (r,) = b.add_node("Relu", [x])
    a = conv(b, r, 4, 4, seed=3)
    c = conv(b, r, 4, 4, seed=4)
    (s,) = b.add_node("Add", [a, c])
    b.set_outputs([s])
    graph = b.build()
    groups = _groups(graph)
    assert [r] in groups
    assert sorted(map(len, groups)) == [1, 1, 2]  # one conv takes the add, the other stays alone
    assert_same_meaning(graph, fuse_ops(graph), rtol=1e-4, atol=1e-4)


def test_two_convs_never_share_a_group():
    b, x = image_builder()
    y = conv(b, x, 4, 4, seed=5)
    z = conv(b, y, 4, 4, seed=6)
    b.set_outputs([z])
    assert _groups(b.build()) == [[y], [z]]


def test_graph_outputs_are_not_fused_into_later_nodes():
    b, x = image_builder()
    y = conv(b, x, 4, 4, seed=7)
    (r,) = b.add_node("Relu", [y])
    (e,) = b.add_node("Exp", [r])
    b.set_outputs([r, e])
    graph = b.build()
    assert _groups(graph) == [[y, r], [e]]
    after = fuse_ops(graph)
    assert after.nodes[0].outputs == (r,)
    assert_same_meaning(graph, after, rtol=1e-4, atol=1e-4)


def test_an_exported_intermediate_becomes_a_second_kernel_output():
    nodes = [Node("Exp", ("x",), ("a",)), Node("Neg", ("a",), ("y",)), Node("MatMul", ("a", "x"), ("z",))]
    graph = _elementwise(nodes, ("y", "z"))
    groups = _groups(graph)
    assert ["z"] in groups  # a MatMul never takes producers
    assert_same_meaning(graph, fuse_ops(graph))


def test_injective_ops_fuse_with_each_other_and_into_a_reduction():
    b = GraphBuilder("inj")
    x = b.add_input("x", TensorType((2, 3, 4), F32))
    (t,) = b.add_node("Transpose", [x], perm=(0, 2, 1))
    (e,) = b.add_node("Exp", [t])
    (r,) = b.add_node("Reshape", [e], shape=(8, 3))
    (s,) = b.add_node("ReduceSum", [r], axes=(1,), keepdims=0)
    (y,) = b.add_node("Relu", [s])
    b.set_outputs([y])
    graph = b.build()
    assert _groups(graph) == [[t, e, r, s], [y]]  # a reduction takes no epilogue (TVM's rule)
    assert_same_meaning(graph, fuse_ops(graph))


def test_opaque_ops_stay_alone():
    b = GraphBuilder("opaque")
    x = b.add_input("x", TensorType((2, 8), F32))
    (e,) = b.add_node("Exp", [x])
    (s,) = b.add_node("Softmax", [e], axis=1)
    (y,) = b.add_node("Relu", [s])
    b.set_outputs([y])
    assert _groups(b.build()) == [[e], [s], [y]]


def test_debug_print_shows_the_fused_ops(capsys):
    graph, _ = _conv_bias_relu()
    with debug_level(2):
        run_passes(graph, [("fuse_ops", fuse_ops)])
    err = capsys.readouterr().err
    assert "// after fuse_ops" in err and "Fused(" in err and "= Relu(" in err


@pytest.mark.parametrize("target", ["x86-64-v3", "x86-64-v4"])
@pytest.mark.parametrize("level,computing", [(0, 4), (1, 2), (2, 1), (3, 1)])
def test_each_group_is_one_kernel(level, computing, target):
    from tests.backend_calls import build_executable
    from tests.backend_calls import optimize
    from core.target import get_target

    graph, _ = _conv_bias_relu()
    tgt = get_target(target)  # lowered only, never run: any x86 host builds both
    optimized = optimize(graph, level, tgt)
    exe = build_executable(optimized, tgt)
    assert len(exe.kernels) == len(optimized.nodes)
    # At 8 lanes (x86-64-v3) the 4-channel conv runs blocked at -O3, between two layout transforms of its own.
    assert len([k for k in exe.kernels if k.ops != ("LayoutTransform",)]) == computing, [k.ops for k in exe.kernels]
    assert exe.memory.arena_bytes <= exe.memory.naive_bytes


def test_walk_looks_inside_fused_nodes():
    graph, _ = _conv_bias_relu()
    after = fuse_ops(graph)
    walked = list(after.walk())
    assert [n.op for n, _ in walked] == ["Conv", "Add", "Mul", "Relu"]
    assert all(owner is after.nodes[0].attr("body") for _, owner in walked)
