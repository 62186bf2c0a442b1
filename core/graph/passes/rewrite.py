"""Helpers shared by rewriting passes: value renaming, fresh names and use counts."""
from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping

from core.graph.ir import Graph, Node


def resolve(name: str, renames: Mapping[str, str]) -> str:
    """Follows a chain of renames (a -> b -> c) to its end."""
    while name in renames:
        name = renames[name]
    return name


def rename_inputs(node: Node, renames: Mapping[str, str]) -> Node:
    if not renames or not any(i in renames for i in node.inputs):
        return node
    return dataclasses.replace(node, inputs=tuple(resolve(i, renames) if i else i for i in node.inputs))


def apply_renames(nodes: Iterable[Node], renames: Mapping[str, str]) -> tuple[Node, ...]:
    return tuple(rename_inputs(n, renames) for n in nodes)


def fresh_name(base: str, taken: Iterable[str] | Mapping[str, object]) -> str:
    taken = taken if isinstance(taken, (set, frozenset, dict)) else set(taken)
    name, counter = base, 0
    while name in taken:
        counter += 1
        name = f"{base}_{counter}"
    return name


def use_counts(graph: Graph) -> dict[str, int]:
    """How many node inputs read each value; graph outputs count as one more use."""
    counts: dict[str, int] = {}
    for node in graph.nodes:
        for i in node.inputs:
            if i:
                counts[i] = counts.get(i, 0) + 1
    for out in graph.outputs:
        counts[out] = counts.get(out, 0) + 1
    return counts
