"""In-place candidates: a kernel whose only output is computed elementwise from an input of the same
type may write over that input (when the input dies there, which the executor checks)."""
from __future__ import annotations

from typing import Optional, Sequence

from core.graph.ir import Graph, Node
from core.graph.ops import Pattern, get_op


def _elementwise_same_shape(node: Node, graph: Graph, shape: tuple[int, ...]) -> bool:
    try:
        pattern = get_op(node.op).pattern
    except KeyError:
        return False
    return pattern <= Pattern.BROADCAST and len(node.outputs) == 1 and graph.type_of(node.outputs[0]).shape == shape


def inplace_input(nodes: Sequence[Node], graph: Graph, inputs: Sequence[str], outputs: Sequence[str]) -> Optional[str]:
    """The first kernel input the kernel's single output may overwrite: every node of the kernel that
    reads it, and every node after those, is elementwise on the output's shape, so each output
    element is written only after the same element of the input was read, and nothing else
    reads the input (a conv anchor reading it, say, would see it half overwritten)."""
    if len(outputs) != 1:
        return None
    out_type = graph.type_of(outputs[0])
    readers: dict[str, list[Node]] = {}
    for node in nodes:
        for value in node.inputs:
            if value:
                readers.setdefault(value, []).append(node)
    for value in inputs:
        if graph.type_of(value) != out_type:
            continue
        frontier, seen, ok = list(readers.get(value, [])), set(), True
        while frontier and ok:
            node = frontier.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            ok = _elementwise_same_shape(node, graph, out_type.shape)
            for out in node.outputs:
                frontier.extend(readers.get(out, []))
        if ok and seen:
            return value
    return None
