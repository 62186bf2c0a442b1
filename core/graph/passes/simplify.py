"""Algebraic simplification by per-op rules: Identity and no-op nodes removed, Reshape chains merged,
Transpose pairs composed (and cancelled when they undo each other), Pow by a small integer constant
made an alias, Muls and a Reciprocal."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Mapping, Union

import numpy as np

from core.graph.ir import Graph, Node, TensorType
from core.graph.op_facts import Fact, op_rule, own_rules

from .registry import register_pass
from .rewrite import fresh_name, rename_inputs


@dataclass(frozen=True)
class Alias:
    """The node's (single) output is just this existing value."""

    value: str


@dataclass(frozen=True)
class Expansion:
    """Several nodes in place of one: the last produces the node's outputs; `types` types the new values."""

    nodes: tuple[Node, ...]
    types: Mapping[str, TensorType]


Rewrite = Union[Alias, Node, Expansion, None]  # None: keep the node as it is
RuleFn = Callable[[Node, Graph, Mapping[str, Node]], Rewrite]  # a Fact.SIMPLIFY rule (core/graph/op_facts.py)


@op_rule(Fact.SIMPLIFY, "Identity")
def _identity(node: Node, graph: Graph, producers: Mapping[str, Node]) -> Rewrite:
    return Alias(node.inputs[0])


@op_rule(Fact.SIMPLIFY, "Reshape", "Expand")
def _same_shape(node: Node, graph: Graph, producers: Mapping[str, Node]) -> Rewrite:
    same = graph.type_of(node.inputs[0]) == graph.type_of(node.outputs[0])
    return Alias(node.inputs[0]) if same else None


@op_rule(Fact.SIMPLIFY, "Cast")
def _same_dtype(node: Node, graph: Graph, producers: Mapping[str, Node]) -> Rewrite:
    return Alias(node.inputs[0]) if graph.type_of(node.inputs[0]).dtype == node.attr("to") else None


@op_rule(Fact.SIMPLIFY, "Reshape")
def _reshape_chain(node: Node, graph: Graph, producers: Mapping[str, Node]) -> Rewrite:
    """Reshape(Reshape(x)) is one Reshape of x (Flatten, Squeeze and Unsqueeze import as Reshape)."""
    inner = producers.get(node.inputs[0])
    if inner is None or inner.op != "Reshape":
        return None
    if graph.type_of(inner.inputs[0]) == graph.type_of(node.outputs[0]):
        return Alias(inner.inputs[0])
    return dataclasses.replace(node, inputs=(inner.inputs[0],))


@op_rule(Fact.SIMPLIFY, "Transpose")
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


_FLOAT_DTYPES = {"float16", "bfloat16", "float32", "float64"}
_MAX_POWER = 4  # |n| up to 4: at most two multiplies, each rounding once (x*x alone is exactly pow(x, 2))


@op_rule(Fact.SIMPLIFY, "Pow")
def _small_power(node: Node, graph: Graph, producers: Mapping[str, Node]) -> Rewrite:
    """x ** n for a constant integer 1 <= |n| <= 4 as multiplies (and a Reciprocal for n < 0) instead of
    a libm pow per element: x ** 1 is x, x ** 2 is x * x (bit-exact), x ** 3 is (x * x) * x as ONNX
    Runtime computes it (GPT-2's GELU), x ** 4 is (x * x) * (x * x), x ** -n is 1 / x ** n. Only a
    scalar-like float constant exponent, on a float x whose type the node keeps."""
    base, exponent = node.inputs
    value = graph.constants.get(exponent)
    x_type = graph.type_of(base)
    if value is None or np.size(value) != 1 or x_type != graph.type_of(node.outputs[0]):
        return None
    power = float(np.asarray(value).reshape(()))
    if x_type.dtype not in _FLOAT_DTYPES or power != int(power) or not 1 <= abs(power) <= _MAX_POWER:
        return None
    n = int(power)
    if n == 1:
        return Alias(base)
    nodes: list[Node] = []
    types: dict[str, TensorType] = {}

    def emit(op: str, inputs: tuple[str, ...], suffix: str) -> str:
        out = fresh_name(f"{node.outputs[0]}.{suffix}", graph.types)
        nodes.append(Node(op, inputs, (out,), {}, f"{node.name}.{suffix}" if node.name else ""))
        types[out] = x_type
        return out

    positive = square = emit("Mul", (base, base), "square") if abs(n) >= 2 else base
    if abs(n) > 2:
        positive = emit("Mul", (square, base if abs(n) == 3 else square), "pow")
    if n < 0:
        emit("Reciprocal", (positive,), "reciprocal")
    last = nodes[-1]  # renamed to produce the Pow's output
    nodes[-1] = Node(last.op, last.inputs, node.outputs, {}, node.name)
    del types[last.outputs[0]]
    return Expansion(tuple(nodes), types)


def _rewrite(node: Node, graph: Graph, producers: Mapping[str, Node]) -> Rewrite:
    result: Rewrite = None
    for fn in own_rules(node.op, Fact.SIMPLIFY):
        result = fn(node, graph, producers)
        if isinstance(result, (Alias, Expansion)):
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
    new_types: dict[str, TensorType] = {}
    for node in graph.nodes:
        node = rename_inputs(node, renames)
        result = _rewrite(node, graph, producers)
        if isinstance(result, Alias) and len(node.outputs) == 1 and node.outputs[0] not in outputs:
            renames[node.outputs[0]] = result.value
            continue
        kept = result.nodes if isinstance(result, Expansion) else (result if isinstance(result, Node) else node,)
        if isinstance(result, Expansion):
            new_types.update(result.types)
        nodes.extend(kept)
        producers.update((o, n) for n in kept for o in n.outputs)
    if not new_types:
        return graph.replace(nodes=tuple(nodes))
    return graph.replace(nodes=tuple(nodes), types={**graph.types, **new_types})
