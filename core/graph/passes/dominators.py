"""Post-dominator tree of a graph's nodes (TVM FuseOps: the dominator tree of the reversed graph),
with the combined pattern of the edges on the way to each node's immediate post-dominator."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from core.graph.ir import Graph, Node
from core.graph.ops import Pattern, get_op


@dataclass(frozen=True)
class Edge:
    consumer: int  # node index
    pattern: Pattern  # how the consumer reads this node's output (broadcast of an equal shape is elementwise)


@dataclass(frozen=True)
class ForwardGraph:
    """Nodes in topological order with their op patterns, consumer edges and whether a graph output
    (an external reference) keeps them from being fused into anything after them."""

    nodes: tuple[Node, ...]
    patterns: tuple[Pattern, ...]
    edges: tuple[tuple[Edge, ...], ...]
    external: tuple[bool, ...]


def op_pattern(node: Node) -> Pattern:
    try:
        return get_op(node.op).pattern
    except KeyError:
        return Pattern.OPAQUE


def forward_graph(graph: Graph) -> ForwardGraph:
    index = {o: k for k, n in enumerate(graph.nodes) for o in n.outputs}
    edges: list[list[Edge]] = [[] for _ in graph.nodes]
    patterns = tuple(op_pattern(n) for n in graph.nodes)
    for k, node in enumerate(graph.nodes):
        out_shape = graph.type_of(node.outputs[0]).shape if node.outputs else None
        for value in dict.fromkeys(i for i in node.inputs if i in index):
            pattern = patterns[k]
            if pattern == Pattern.BROADCAST and graph.type_of(value).shape == out_shape:
                pattern = Pattern.ELEMWISE
            edges[index[value]].append(Edge(k, pattern))
    outputs = set(graph.outputs)
    external = tuple(any(o in outputs for o in n.outputs) for n in graph.nodes)
    return ForwardGraph(tuple(graph.nodes), patterns, tuple(tuple(e) for e in edges), external)


@dataclass(frozen=True)
class PostDominatorTree:
    """parent[k]: node k's immediate post-dominator (None: the graph's exit); pattern[k]: the most
    complex edge pattern on the paths from k to it; depth[k]: distance from the exit."""

    parent: tuple[Optional[int], ...]
    pattern: tuple[Pattern, ...]
    depth: tuple[int, ...]


def post_dominators(fg: ForwardGraph) -> PostDominatorTree:
    n = len(fg.nodes)
    parent: list[Optional[int]] = [None] * n
    pattern: list[Pattern] = [Pattern.OPAQUE] * n
    depth: list[int] = [0] * n

    def lca(a: Optional[int], b: Optional[int], combined: Pattern) -> tuple[Optional[int], Pattern]:
        while a != b:
            if a is None or b is None:
                return None, combined
            if depth[a] < depth[b]:
                combined = max(combined, pattern[b])
                b = parent[b]
            elif depth[b] < depth[a]:
                combined = max(combined, pattern[a])
                a = parent[a]
            else:
                combined = max(combined, pattern[a], pattern[b])
                a, b = parent[a], parent[b]
        return a, combined

    for k in reversed(range(n)):
        edges = fg.edges[k]
        if fg.external[k] or not edges:
            parent[k], pattern[k], depth[k] = None, Pattern.OPAQUE, 1
            continue
        dom: Optional[int] = edges[0].consumer
        combined = edges[0].pattern
        for edge in edges[1:]:
            dom, combined = lca(dom, edge.consumer, combined)
            combined = max(combined, edge.pattern)
            if dom is None:
                break
        parent[k] = dom
        pattern[k] = combined if dom is not None else Pattern.OPAQUE
        depth[k] = depth[dom] + 1 if dom is not None else 1
    return PostDominatorTree(tuple(parent), tuple(pattern), tuple(depth))
