"""Helpers for graph pass tests: small hand-built graphs and a check that a pass keeps a graph's meaning
(through the reference interpreter)."""

from __future__ import annotations

import numpy as np

from core.graph.builder import GraphBuilder
from core.graph.interpret import evaluate
from core.graph.ir import Graph, TensorType

F32 = "float32"
CONV = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def conv(b: GraphBuilder, x: str, channels: int, out: int, seed: int, bias: bool = True) -> str:
    r = rng(seed)
    w = b.add_constant(r.standard_normal((out, channels, 3, 3)).astype(np.float32), "w")
    inputs = [x, w] + ([b.add_constant(r.standard_normal(out).astype(np.float32), "b")] if bias else [])
    return b.add_node("Conv", inputs, name_hint="conv", **CONV)[0]


def feeds_for(graph: Graph, seed: int = 1) -> dict[str, np.ndarray]:
    r = rng(seed)
    return {n: r.standard_normal(graph.type_of(n).shape).astype(graph.type_of(n).dtype) for n in graph.inputs}


def assert_same_meaning(before: Graph, after: Graph, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    feeds = feeds_for(before)
    expected, actual = evaluate(before, feeds), evaluate(after, feeds)
    assert before.outputs == after.outputs
    for name in before.outputs:
        np.testing.assert_allclose(actual[name], expected[name], rtol=rtol, atol=atol, err_msg=name)


def image_builder(shape=(1, 4, 6, 6)) -> tuple[GraphBuilder, str]:
    b = GraphBuilder("hand")
    return b, b.add_input("x", TensorType(shape, F32))


def ops(graph: Graph) -> list[str]:
    return [n.op for n in graph.nodes]
