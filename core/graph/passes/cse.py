"""Common-subexpression elimination: identical constants become one, and a node that repeats an
earlier node (same op, inputs and attributes) reuses that node's outputs."""
from __future__ import annotations

import hashlib

import numpy as np

from core.graph.ir import Graph, Node, _hashable

from .registry import register_pass
from .rewrite import rename_inputs


def _constant_key(value: np.ndarray) -> tuple:
    data = np.ascontiguousarray(value)
    return value.dtype.str, value.shape, hashlib.sha1(data.tobytes()).hexdigest()


def _node_key(node: Node) -> tuple:
    # Attributes compare by value, arrays by their bytes (== on arrays would be elementwise).
    return node.op, node.inputs, len(node.outputs), tuple(sorted((k, _hashable(v)) for k, v in node.attrs.items()))


@register_pass("cse")
def eliminate_common_subexpressions(graph: Graph) -> Graph:
    renames: dict[str, str] = {}
    first_constant: dict[tuple, str] = {}
    for name, value in graph.constants.items():
        renames_to = first_constant.setdefault(_constant_key(value), name)
        if renames_to != name:
            renames[name] = renames_to
    outputs = set(graph.outputs)
    seen: dict[tuple, Node] = {}
    nodes: list[Node] = []
    for node in graph.nodes:
        node = rename_inputs(node, renames)
        key = _node_key(node)
        earlier = seen.get(key)
        if earlier is not None and not outputs.intersection(node.outputs):
            renames.update(zip(node.outputs, earlier.outputs))
            continue
        seen.setdefault(key, node)
        nodes.append(node)
    constants = {k: v for k, v in graph.constants.items() if k not in renames}
    types = {k: t for k, t in graph.types.items() if k not in renames}
    return graph.replace(nodes=tuple(nodes), constants=constants, types=types)
