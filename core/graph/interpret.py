"""Reference interpreter: runs a graph with each op's numpy `fold` (a test oracle, never used to
produce compiled outputs)."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from core.errors import ShapeError
from core.graph.ir import Graph
from core.graph.fold import fold_node


def _check_feeds(graph: Graph, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    missing = [n for n in graph.inputs if n not in feeds]
    unknown = [n for n in feeds if n not in graph.inputs]
    if missing or unknown:
        raise ShapeError(f"feeds do not match graph inputs {list(graph.inputs)}: missing {missing}, unknown {unknown}")
    checked = {}
    for name in graph.inputs:
        value, expected = np.asarray(feeds[name]), graph.type_of(name)
        if value.shape != expected.shape or value.dtype.name != expected.dtype:
            raise ShapeError(f"input {name}: got {value.dtype.name}{list(value.shape)}, expected {expected}")
        checked[name] = value
    return checked


def evaluate(graph: Graph, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    env: dict[str, np.ndarray] = dict(graph.constants)
    env.update(_check_feeds(graph, feeds))
    for node in graph.nodes:
        inputs = [env[i] if i else None for i in node.inputs]
        results = fold_node(node.op, inputs, node.attrs, [graph.type_of(o) for o in node.outputs])
        env.update(zip(node.outputs, results))
    return {name: env[name] for name in graph.outputs}
