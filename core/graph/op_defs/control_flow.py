"""If and Loop at run time: nodes holding their branches / body as graphs, each compiled as its own function.

If: inputs (cond, *captured); attrs `branches` (then, else: a Graph, or None for a branch that does not
compile for these shapes, with its reason in `refusals`), `inputs_of` (per branch, each of its graph inputs
as an index into the node's inputs) and `out_types` (the node's outputs: a branch output smaller than its
slot fills its start, core/codegen/control_flow.py), `shaped` (the outputs that differ in shape between the
branches, or that a branch shapes at run time: each has an int64 [1 + rank] shape output after the others) and
`given_shapes` (per branch, the outputs whose shape it gives itself, a nested If deciding it: its graph's
`NAME::shape` outputs, in that order, after the others); `paired` ((output, axis, per branch its length or None
when it gives it) of the outputs that differ along one axis only: bounded values, each with an int64 [2]
[axis, length] output after the shape outputs) and `given_lengths` (per branch, the outputs whose length it
gives itself, its graph's `NAME::bound` outputs, before its `::shape` ones). Loop: inputs (M or "", cond or "",
*carried, *captured); attrs `body` (inputs: iteration, condition, the carried values, a length per growing
one, then the captured values; outputs: condition, carried values, scan outputs, an [axis, length] per growing
one), `carried` (how many), `growing` ((carried index, axis) of those that grow per iteration, compiled at their
largest size), `trip_bound` (the most iterations scan outputs and growing values have room for; 0: none
needed) and `out_types`: the final carried values, the scan outputs (trip_bound entries along axis 0), the
int64 [1] count of iterations run and an [axis, length] per growing value."""
from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Sequence

from core.errors import ShapeError
from core.graph.ir import Graph, TensorType
from core.graph.ops import Pattern, register_op

CONTROL_FLOW_OPS = frozenset({"If", "Loop"})


def subgraphs(attrs: Mapping) -> list[Graph]:
    """The graphs an If or Loop node runs (its compiled branches or body)."""
    if "body" in attrs:
        return [attrs["body"]]
    return [g for g in attrs.get("branches", ()) if g is not None]


def _out_types(name: str, attrs: Mapping) -> list[TensorType]:
    types = attrs.get("out_types")
    if not types or not all(isinstance(t, TensorType) for t in types):
        raise ShapeError(f"{name}: attribute out_types must list the output types")
    return list(types)


def _no_flops(inputs, outputs, attrs) -> int:
    return 0  # the branches' and body's kernels count their own


@register_op("If", Pattern.OPAQUE, flops=_no_flops)
def _if(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    if not types or types[0] is None or types[0].numel != 1:
        raise ShapeError("If: the condition must be one boolean")
    return _out_types("If", attrs)


@register_op("Loop", Pattern.OPAQUE, flops=_no_flops)
def _loop(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    if not isinstance(attrs.get("body"), Graph):
        raise ShapeError("Loop: attribute body must be a graph")
    return _out_types("Loop", attrs)


def optimize_subgraphs(graph: Graph, optimize: Callable[[Graph], Graph]) -> Graph:
    """`graph` with the branches and bodies of its If and Loop nodes optimized (their interfaces unchanged)."""
    nodes = []
    for node in graph.nodes:
        if node.op == "If":
            branches = tuple(None if g is None else _same_interface(g, optimize(g)) for g in node.attr("branches"))
            node = dataclasses.replace(node, attrs={**node.attrs, "branches": branches})
        elif node.op == "Loop":
            node = dataclasses.replace(node, attrs={**node.attrs, "body": _same_interface(node.attr("body"),
                                                                                          optimize(node.attr("body")))})
        nodes.append(node)
    return graph.replace(nodes=tuple(nodes))


def _same_interface(before: Graph, after: Graph) -> Graph:
    if after.inputs != before.inputs or after.outputs != before.outputs:
        raise ShapeError(f"optimizing subgraph {before.name!r} changed its inputs or outputs")
    return after
