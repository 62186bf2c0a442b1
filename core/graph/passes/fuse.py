"""Operator fusion with TVM's rules (FuseOps): groups form along post-dominator paths, so a group
never duplicates work or cuts a branch; each group becomes one Fused node (one kernel)."""
from __future__ import annotations

from typing import Callable, Mapping

from core.graph.ir import Graph, Node, topological_sort
from core.graph.ops import Pattern

from .dominators import ForwardGraph, PostDominatorTree, forward_graph, op_pattern, post_dominators
from .registry import register_pass

MAX_GROUP_NODES = 64  # TVM's max_fuse_depth is 256; Kiln's kernels gain nothing from longer chains
# A group with a gather stays a kernel of its own when its consumer is this many times larger: fused, every
# entry of the broadcast would redo the gather and its index arithmetic (a [batch*seq] mask compacted for
# run-time lengths, broadcast to [batch, 1, seq, seq]: 1.5 s fused, nothing apart)
GATHER_BROADCAST_LIMIT = 64
_GATHERS = frozenset({"Gather", "GatherElements", "GatherND"})
PathCondition = Callable[[Pattern, bool], bool]  # (group pattern of a node on the path, is it the sink)


class _Groups:
    """Union-find over node indices; each root holds its group's pattern and size."""

    def __init__(self, patterns: tuple[Pattern, ...]):
        self.parent = list(range(len(patterns)))
        self.pattern = list(patterns)
        self.size = [1] * len(patterns)

    def root(self, k: int) -> int:
        while self.parent[k] != k:
            self.parent[k] = self.parent[self.parent[k]]
            k = self.parent[k]
        return k

    def merge(self, child: int, target: int) -> None:
        child, target = self.root(child), self.root(target)
        if child == target:
            return
        self.parent[child] = target
        self.size[target] += self.size[child]
        self.pattern[target] = max(self.pattern[target], self.pattern[child])


class _Fuser:
    def __init__(self, fg: ForwardGraph, tree: PostDominatorTree, graph: Graph):
        self.fg, self.tree, self.graph = fg, tree, graph
        self.groups = _Groups(fg.patterns)

    def numel(self, k: int) -> int:
        return self.graph.type_of(self.fg.nodes[k].outputs[0]).numel

    def gathers_into_broadcast(self, k: int, dom: int) -> bool:
        """Whether k's group gathers and its consumer `dom` is GATHER_BROADCAST_LIMIT times larger."""
        if self.numel(dom) < GATHER_BROADCAST_LIMIT * max(self.numel(k), 1):
            return False
        group = self.groups.root(k)
        return any(n.op in _GATHERS for j, n in enumerate(self.fg.nodes) if self.groups.root(j) == group)

    def pattern_of(self, k: int) -> Pattern:
        return self.groups.pattern[self.groups.root(k)]

    def check_path(self, src: int, sink: int, cond: PathCondition) -> bool:
        """Whether every node on every path from src (exclusive) to sink (inclusive) satisfies cond."""
        visited: set[int] = set()
        stack = [e.consumer for e in self.fg.edges[src]]
        while stack:
            k = stack.pop()
            if k in visited:
                continue
            visited.add(k)
            if not cond(self.pattern_of(k), k == sink):
                return False
            if k != sink:
                if not self.fg.edges[k]:
                    return False  # a path that leaves without meeting the sink (cannot happen below a post-dominator)
                stack.extend(e.consumer for e in self.fg.edges[k])
        return True

    def commit(self, src: int, sink: int) -> None:
        """Merges src and every node between it and sink into sink's group."""
        target = self.groups.root(sink)
        visited: set[int] = set()
        stack = [src]
        while stack:
            k = stack.pop()
            if k == sink or k in visited:
                continue
            visited.add(k)
            self.groups.merge(k, target)
            stack.extend(e.consumer for e in self.fg.edges[k])

    def group_size_after(self, src: int, sink: int) -> int:
        members = {self.groups.root(src), self.groups.root(sink)}
        return sum(self.groups.size[r] for r in members)

    def run(self, phase: int) -> None:
        for k in range(len(self.fg.nodes)):
            # As in TVM: a group's root acts with its group's pattern (an Add that took a conv is
            # complex and takes the next ReLU), a node merged into a later group with its own.
            pattern = self.pattern_of(k) if self.groups.root(k) == k else self.fg.patterns[k]
            dom = self.tree.parent[k]
            if pattern == Pattern.OPAQUE or dom is None or self.groups.root(dom) == self.groups.root(k):
                continue
            if self.group_size_after(k, dom) > MAX_GROUP_NODES:
                continue
            rule = _RULES.get(_kind(pattern))
            if rule is not None and rule(self, k, dom, phase):
                self.commit(k, dom)


def _kind(pattern: Pattern) -> str:
    if pattern <= Pattern.BROADCAST:
        return "elementwise"
    return {Pattern.INJECTIVE: "injective", Pattern.OUT_ELEMWISE_FUSABLE: "complex"}.get(pattern, "other")


FuseRule = Callable[[_Fuser, int, int, int], bool]  # (fuser, node, its post-dominator, phase) -> fuse?


def _complex_out(f: _Fuser, k: int, dom: int, phase: int) -> bool:
    """Conv/MatMul/pool: take the elementwise ops that follow (bias, BN, ReLU/Clip, residual Add)."""
    if phase != 0 or f.tree.pattern[k] != Pattern.ELEMWISE:
        return False
    return f.check_path(k, dom, lambda kind, is_sink: kind <= Pattern.BROADCAST)


def _elementwise(f: _Fuser, k: int, dom: int, phase: int) -> bool:
    """Elementwise/broadcast ops join an injective or reduction consumer, or an epilogue that is
    already part of a complex op's group."""
    if phase != 0 or not (f.tree.pattern[k] <= Pattern.INJECTIVE or f.tree.pattern[k] == Pattern.REDUCTION):
        return False

    def cond(kind: Pattern, is_sink: bool) -> bool:
        if not is_sink:
            return kind <= Pattern.INJECTIVE
        return kind <= Pattern.OUT_ELEMWISE_FUSABLE

    return f.check_path(k, dom, cond)


def _injective(f: _Fuser, k: int, dom: int, phase: int) -> bool:
    """Injective ops fuse in a second phase (so complex ops finish fusing first) into injective
    consumers, or into a reduction that reads them."""
    if phase != 1 or _gathers_into_unblocking(f, k, dom) or f.gathers_into_broadcast(k, dom):
        return False
    return f.check_path(k, dom, lambda kind, is_sink: kind <= Pattern.INJECTIVE
                        or (is_sink and kind == Pattern.REDUCTION))


def _gathers_into_unblocking(f: _Fuser, k: int, dom: int) -> bool:
    """An Interpolate of blocked data stays apart from the LayoutTransform back to NCHW after it: fused, the kernel
    runs along NCHW's columns and every lane gathers its own tap from a channel block (a 4x bilinear upsampling
    of 64 x 28 x 28, x86-64-v3: 10.5 ms fused; apart, 0.4 ms resizing whole channel blocks and a transpose)."""
    if f.fg.nodes[k].op != "Interpolate":
        return False
    group = f.groups.root(dom)
    return any(n.op == "LayoutTransform" and n.attrs.get("dst_block") == 0 and n.attrs.get("src_block")
               for j, n in enumerate(f.fg.nodes) if f.groups.root(j) == group)


_RULES: dict[str, FuseRule] = {"complex": _complex_out, "elementwise": _elementwise, "injective": _injective}


def fusion_groups(graph: Graph) -> list[list[int]]:
    """Node indices per group, each group in topological order, groups ordered by first node."""
    fg = forward_graph(graph)
    fuser = _Fuser(fg, post_dominators(fg), graph)
    for phase in (0, 1):
        fuser.run(phase)
    members: dict[int, list[int]] = {}
    for k in range(len(fg.nodes)):
        members.setdefault(fuser.groups.root(k), []).append(k)
    return sorted(members.values(), key=lambda g: g[0])


def fused_node(nodes: list[Node], graph: Graph, index: int, consumers: Mapping[str, list[Node]]) -> Node:
    """One Fused node whose body is the group as a graph over the values it reads and exports."""
    produced = {o for n in nodes for o in n.outputs}
    inputs = tuple(dict.fromkeys(i for n in nodes for i in n.inputs if i and i not in produced))
    member = {id(n) for n in nodes}
    outputs = set(graph.outputs)
    exported = tuple(o for n in nodes for o in n.outputs
                     if o in outputs or any(id(c) not in member for c in consumers.get(o, ())))
    types = {k: graph.type_of(k) for k in set(inputs) | produced}
    body = Graph(inputs, exported, tuple(nodes), types, {}, name=f"fused{index}")
    pattern = max(op_pattern(n) for n in nodes)
    return Node("Fused", inputs, exported, {"body": body, "ops": tuple(n.op for n in nodes), "pattern": int(pattern)},
                name=f"fused{index}")


@register_pass("fuse_ops")
def fuse_ops(graph: Graph) -> Graph:
    consumers = graph.consumers()
    nodes: list[Node] = []
    for k, group in enumerate(fusion_groups(graph)):
        members = [graph.nodes[i] for i in group]
        nodes.append(members[0] if len(members) == 1 else fused_node(members, graph, k, consumers))
    available = list(graph.inputs) + list(graph.constants)
    return graph.replace(nodes=topological_sort(nodes, available))
