"""Constant folding: every all-constant node worth folding (core/graph/fold.py) becomes constants."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from core.graph.fold import fold_node, worth_folding
from core.graph.ir import Graph, Node
from core.graph.ops import get_op

from .registry import register_pass

def _fresh(base: str, taken: Mapping[str, object]) -> str:
    name, counter = base, 0
    while name in taken:
        counter += 1
        name = f"{base}_{counter}"
    return name


@register_pass("fold_constants")
def fold_constants(graph: Graph) -> Graph:
    """Replaces all-constant nodes by constants; graph outputs stay produced by (Identity) nodes."""
    constants = dict(graph.constants)
    types = dict(graph.types)
    outputs = set(graph.outputs)
    nodes: list[Node] = []
    for node in graph.nodes:
        present = [i for i in node.inputs if i]
        foldable = present and all(i in constants for i in present) and get_op(node.op).fold is not None
        already_minimal = node.op == "Identity" and node.outputs[0] in outputs
        if not foldable or already_minimal:
            nodes.append(node)
            continue
        arrays = [constants[i] if i else None for i in node.inputs]
        out_types = [types[o] for o in node.outputs]
        if not worth_folding(arrays, out_types):
            nodes.append(node)
            continue
        for out, value in zip(node.outputs, fold_node(node.op, arrays, node.attrs, out_types)):
            value = np.ascontiguousarray(value)
            value.flags.writeable = False
            if out in outputs:
                holder = _fresh(f"{out}_folded", types)
                constants[holder] = value
                types[holder] = types[out]
                nodes.append(Node("Identity", (holder,), (out,), name=node.name))
            else:
                constants[out] = value
    return graph.replace(nodes=tuple(nodes), constants=constants, types=types)
