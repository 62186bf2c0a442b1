"""Algebraic simplification by per-op rules: Identity and no-op nodes removed, Reshape chains merged,
Transpose pairs composed (and cancelled when they undo each other), Pow by a constant 1 or 2 made
an alias or a Mul."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Mapping, Union

import numpy as np

from core.graph.ir import Graph, Node

from .registry import register_pass
from .rewrite import rename_inputs


@dataclass(frozen=True)
class Alias:
    """The node's (single) output is just this existing value."""

    value: str


Rewrite = Union[Alias, Node, None]  # None: keep the node as it is
RuleFn = Callable[[Node, Graph, Mapping[str, Node]], Rewrite]

_RULES: dict[str, list[RuleFn]] = {}


def rule(*ops: str) -> Callable[[RuleFn], RuleFn]:
    """Registers a simplification rule for the given ops (tried in registration order)."""

    def wrap(fn: RuleFn) -> RuleFn:
        for op in ops:
            _RULES.setdefault(op, []).append(fn)
        return fn

    return wrap


@rule("Identity")
def _identity(node: Node, graph: Graph, producers: Mapping[str, Node]) -> Rewrite:
    return Alias(node.inputs[0])


@rule("Reshape", "Expand")
def _same_shape(node: Node, graph: Graph, producers: Mapping[str, Node]) -> Rewrite:
    same = graph.type_of(node.inputs[0]) == graph.type_of(node.outputs[0])
    return Alias(node.inputs[0]) if same else None


@rule("Cast")
def _same_dtype(node: Node, graph: Graph, producers: Mapping[str, Node]) -> Rewrite:
    return Alias(node.inputs[0]) if graph.type_of(node.inputs[0]).dtype == node.attr("to") else None


@rule("Reshape")
def _reshape_chain(node: Node, graph: Graph, producers: Mapping[str, Node]) -> Rewrite:
    """Reshape(Reshape(x)) is one Reshape of x (Flatten, Squeeze and Unsqueeze import as Reshape)."""
    inner = producers.get(node.inputs[0])
    if inner is None or inner.op != "Reshape":
        return None
    if graph.type_of(inner.inputs[0]) == graph.type_of(node.outputs[0]):
        return Alias(inner.inputs[0])
    return dataclasses.replace(node, inputs=(inner.inputs[0],))


@rule("Transpose")
def _transpose(node: Node, graph: Graph, producers: Mapping[str, Node]) -> Rewrite:
    """A permutation that keeps every axis is a no-op; two Transposes in a row are one (or none)."""
    perm = tuple(node.attr("perm"))
    source = node.inputs[0]
    inner = producers.get(source)
    if inner is not None and inner.op == "Transpose":
        first = tuple(inner.attr("perm"))
        perm = tuple(first[p] for p in perm)
        source = inner.inputs[0]
    if perm == tuple(range(len(perm))):
        return Alias(source)
    if source == node.inputs[0]:
        return None
    return Node("Transpose", (source,), node.outputs, {"perm": perm}, node.name)


_EXACT_SQUARE_DTYPES = {"float16", "bfloat16", "float32", "float64"}  # x * x rounds once, as pow(x, 2) does


@rule("Pow")
def _small_power(node: Node, graph: Graph, producers: Mapping[str, Node]) -> Rewrite:
    """x ** 1 is x and x ** 2 is x * x (bit-exact, and a multiply instead of a libm pow per element:
    T5's RMS norm squares every activation). Only a scalar-like float constant exponent that leaves
    x's type unchanged."""
    base, exponent = node.inputs
    value = graph.constants.get(exponent)
    if value is None or np.size(value) != 1 or graph.type_of(base) != graph.type_of(node.outputs[0]):
        return None
    if graph.type_of(base).dtype not in _EXACT_SQUARE_DTYPES:
        return None
    power = float(np.asarray(value).reshape(()))
    if power == 1.0:
        return Alias(base)
    if power == 2.0:
        return Node("Mul", (base, base), node.outputs, {}, node.name)
    return None


def _rewrite(node: Node, graph: Graph, producers: Mapping[str, Node]) -> Rewrite:
    result: Rewrite = None
    for fn in _RULES.get(node.op, ()):
        result = fn(node, graph, producers)
        if isinstance(result, Alias):
            return result
        if isinstance(result, Node):
            node = result
    return node if result is None else result


@register_pass("simplify")
def simplify(graph: Graph) -> Graph:
    """Applies the rules in one topological sweep; graph outputs always stay produced by a node.
    The nodes left without consumers are removed by eliminate_dead_code."""
    outputs = set(graph.outputs)
    renames: dict[str, str] = {}
    producers: dict[str, Node] = {}
    nodes: list[Node] = []
    for node in graph.nodes:
        node = rename_inputs(node, renames)
        result = _rewrite(node, graph, producers)
        if isinstance(result, Alias) and len(node.outputs) == 1 and node.outputs[0] not in outputs:
            renames[node.outputs[0]] = result.value
            continue
        kept: Node = result if isinstance(result, Node) else node
        nodes.append(kept)
        producers.update((o, kept) for o in kept.outputs)
    return graph.replace(nodes=tuple(nodes))
