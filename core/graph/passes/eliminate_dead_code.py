"""Dead-code elimination: drops nodes and constants that no graph output depends on."""
from __future__ import annotations

from core.graph.ir import Graph

from .registry import register_pass


@register_pass("eliminate_dead_code")
def eliminate_dead_code(graph: Graph) -> Graph:
    live = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if any(out in live for out in node.outputs):
            kept.append(node)
            live.update(i for i in node.inputs if i)
    kept.reverse()
    constants = {name: value for name, value in graph.constants.items() if name in live}
    # Graph inputs stay even when unused: they are the compiled model's calling convention.
    defined = set(graph.inputs) | set(constants) | {out for node in kept for out in node.outputs}
    types = {name: t for name, t in graph.types.items() if name in defined}
    return graph.replace(nodes=tuple(kept), constants=constants, types=types)
