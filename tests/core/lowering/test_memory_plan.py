"""Static memory planning: no two live buffers overlap, dead ones are reused."""
from core.lowering.memory import Lifetime, plan_memory


def overlaps(a, b, plan):
    oa, ob = plan.offsets[a.name], plan.offsets[b.name]
    live_together = a.start <= b.end and b.start <= a.end
    return live_together and oa < ob + b.size and ob < oa + a.size


def test_chain_reuses_dead_buffers():
    # a -> b -> c -> d: each value dies after the next step, so two slots suffice.
    lts = [Lifetime(n, 1000, i, i + 1) for i, n in enumerate("abcd")]
    plan = plan_memory(lts)
    assert plan.naive_bytes == 4 * 1024
    assert plan.arena_bytes == 2 * 1024
    assert not any(overlaps(x, y, plan) for x in lts for y in lts if x is not y)


def test_long_lived_buffer_is_never_shared():
    lts = [Lifetime("skip", 4096, 0, 5)] + [Lifetime(f"t{i}", 2048, i, i + 1) for i in range(5)]
    plan = plan_memory(lts)
    assert not any(overlaps(x, y, plan) for x in lts for y in lts if x is not y)
    assert plan.arena_bytes == 4096 + 2 * 2048


def test_offsets_are_aligned():
    plan = plan_memory([Lifetime("x", 3, 0, 0), Lifetime("y", 5, 0, 0)])
    assert all(off % 64 == 0 for off in plan.offsets.values())


def test_inplace_values_share_their_input_buffer():
    # a -> b (in place of a) -> c (in place of b): one buffer for all three; d lives beside it.
    lts = [Lifetime("a", 1000, 0, 1), Lifetime("b", 1000, 1, 2), Lifetime("c", 1000, 2, 3), Lifetime("d", 500, 1, 3)]
    plan = plan_memory(lts, {"b": "a", "c": "b"})
    assert plan.offsets["a"] == plan.offsets["b"] == plan.offsets["c"]
    assert plan.offsets["d"] != plan.offsets["a"]
    assert plan.arena_bytes == 1024 + 512 and plan.naive_bytes == 3 * 1024 + 512


def test_inplace_candidates_are_elementwise_in_the_input():
    import numpy as np

    from core.lowering.inplace import inplace_input
    from core.graph.ir import Graph, Node, TensorType

    t, small = TensorType((2, 8), "float32"), TensorType((8,), "float32")
    types = {"x": t, "r": t, "b": small, "s": t, "y": t, "m": TensorType((2, 2), "float32"), "w": TensorType((8, 8), "float32")}
    graph = Graph(("x", "r"), ("y",), (), types, {"b": np.ones(8, np.float32)})
    add = Node("Add", ("x", "b"), ("s",))
    relu = Node("Relu", ("s",), ("y",))
    assert inplace_input([add, relu], graph, ["x", "b"], ["y"]) == "x"
    assert inplace_input([add, relu], graph, ["b"], ["y"]) is None  # b has another shape
    matmul = Node("MatMul", ("x", "w"), ("s",))
    assert inplace_input([matmul, relu], graph, ["x"], ["y"]) is None  # a matmul reads whole rows of x
    residual = Node("Add", ("s", "x"), ("y",))
    assert inplace_input([matmul, residual], graph, ["x"], ["y"]) is None  # x is read by the matmul too
    assert inplace_input([add, relu], graph, ["x"], ["s", "y"]) is None  # two outputs
