"""If and Loop nodes lowered: each branch or loop body built as an Executable of its own (kernels, call plan,
arena, weights), called from the enclosing plan by an IfCall or LoopCall (core/codegen/control_flow.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from ..codegen.control_flow import GrowingValue, IfCall, LoopCall, SubCall
from ..codegen.model_entry import BufferRef
from ..graph.ir import Graph, Node
from ..graph.op_defs.control_flow import CONTROL_FLOW_OPS

SLOT_ALIGN = 8


def is_control_node(nodes) -> bool:
    return len(nodes) == 1 and nodes[0].op in CONTROL_FLOW_OPS


@dataclass(frozen=True)
class ControlParts:
    """A control node with its branches / body built, and the scratch slots (name, bytes) its call needs."""
    node: Node
    subs: tuple
    slots: tuple[tuple[str, int], ...]
    initial: tuple = ()  # Loop: the carried values' first types (a growing one is smaller than its slot)


def _graphs(node: Node) -> tuple[Optional[Graph], ...]:
    return tuple(node.attr("branches")) if node.op == "If" else (node.attr("body"),)


def prepare_control(node: Node, graph: Graph, target, name: str, build: Callable) -> ControlParts:
    """`build(graph, target, prefix)` builds a branch or body (build_executable, its kernels named PREFIX...)."""
    tags = ("then", "else") if node.op == "If" else ("body",)
    subs = tuple(None if g is None else build(g, target, prefix=f"{name}_{tag}_")
                 for tag, g in zip(tags, _graphs(node)))
    for sub, g in zip(subs, _graphs(node)):
        if sub is not None and sub.plan.num_inputs != len(g.inputs):
            raise AssertionError(f"{name}: a branch's plan takes {sub.plan.num_inputs} inputs, its graph "
                                 f"{len(g.inputs)}")
    slots = [("arena", max([s.memory.arena_bytes for s in subs if s is not None] + [SLOT_ALIGN]))]
    if node.op == "Loop":
        body = node.attr("body")
        carried = node.attr("carried")
        slots += [(f"carry{j}", body.type_of(v).nbytes) for j, v in enumerate(body.inputs[2:2 + carried])]
        slots += [(f"next{j}", body.type_of(v).nbytes) for j, v in enumerate(body.outputs[1:1 + carried])]
        slots += [("iteration", 8), ("flag", 1), ("flag_out", 1)]
        slots += [(f"{part}{j}", size) for j, _ in node.attr("growing") for part, size in (("length", 8), ("pair", 16))]
    initial = tuple(graph.type_of(v) for v in node.inputs[2:2 + node.attr("carried")]) if node.op == "Loop" else ()
    return ControlParts(node, subs, tuple((s, max(n, SLOT_ALIGN)) for s, n in slots), initial)


def control_call(parts: ControlParts, label: str, ref: Callable[[str], BufferRef],
                 slot: Callable[[str], BufferRef], place_weights: Callable[[bytes], int]):
    """The IfCall or LoopCall of `parts`: `ref(value)` locates an enclosing value, `slot(name)` a scratch slot,
    `place_weights(blob)` appends a branch's weights to the model's and says where they start."""
    node = parts.node
    subs = []
    for k, sub in enumerate(parts.subs):
        if sub is None:
            subs.append(None)
            continue
        if node.op == "If":
            inputs = tuple(ref(node.inputs[i]) for i in node.attr("inputs_of")[k])
        else:
            first = 2 + node.attr("carried")
            inputs = tuple(ref(v) for v in node.inputs[first:])
        subs.append(SubCall(f"kiln_cf_{label}_{k}", sub.plan, place_weights(sub.weights), slot("arena"), inputs))
    if node.op == "If":
        return _if_call(node, subs, label, ref)
    return _loop_call(parts, subs[0], label, ref, slot)


def _if_call(node: Node, subs: list, label: str, ref: Callable) -> IfCall:
    """Each shape output ([rank, dims...]) and length pair ([axis, length]) is written per branch: a constant, or by
    the branch's runner (a nested If, a data-dependent length), after its values: its pairs, then its shapes."""
    shaped, paired = node.attr("shaped"), node.attr("paired", ())
    given = node.attr("given_shapes", ((), ()))
    lengths = node.attr("given_lengths", ((), ()))
    count = len(node.outputs) - len(shaped) - len(paired)
    values = node.outputs[:count]
    shape_of = dict(zip(shaped, node.outputs[count:count + len(shaped)]))
    pair_of = dict(zip((j for j, _, _ in paired), node.outputs[count + len(shaped):]))
    branch_types = [None if g is None else [g.type_of(o) for o in g.outputs[:count]] for g in node.attr("branches")]
    shapes = []
    for j, shape_value in shape_of.items():
        width = node.attr("out_types")[count + shaped.index(j)].shape[0]
        per_branch = []
        for types, gives in zip(branch_types, given):
            dims = () if types is None else types[j].shape
            per_branch.append(None if j in gives else  # the branch writes it (a nested If decides it at run time)
                              tuple(np.pad(np.array([len(dims), *dims], np.int64), (0, width - 1 - len(dims)))))
        shapes.append((ref(shape_value), tuple(per_branch)))
    for j, axis, per_branch in paired:  # a branch's own length, or None: it writes it (or cannot run)
        shapes.append((ref(pair_of[j]), tuple(None if n is None else (axis, n) for n in per_branch)))
    written = tuple(tuple(ref(pair_of[j]) for j in pairs) + tuple(ref(shape_of[j]) for j in gives)
                    for pairs, gives in zip(lengths, given))
    return IfCall(ref(node.inputs[0]), tuple(subs), tuple(node.attr("refusals")), tuple(ref(v) for v in values),
                  tuple(shapes), label, given_shapes=written)


def _loop_call(parts: ControlParts, body: SubCall, label: str, ref: Callable, slot: Callable) -> LoopCall:
    node = parts.node
    graph = node.attr("body")
    carried, growing = node.attr("carried"), node.attr("growing")
    num_scans = len(graph.outputs) - 1 - carried - len(growing)
    initial = node.inputs[2:2 + carried]
    nbytes = tuple(graph.type_of(v).nbytes for v in graph.inputs[2:2 + carried])
    scans = node.outputs[carried:carried + num_scans]
    steps = tuple(graph.type_of(o).nbytes for o in graph.outputs[1 + carried:1 + carried + num_scans])
    pairs = node.outputs[carried + num_scans + 1:]
    lengths = tuple(GrowingValue(axis, parts.initial[j].shape[axis], slot(f"length{j}"), slot(f"pair{j}"), ref(pair))
                    for (j, axis), pair in zip(growing, pairs))
    return LoopCall(ref(node.inputs[0]) if node.inputs[0] else None,
                    ref(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None,
                    body, tuple(ref(v) for v in initial), nbytes,
                    tuple(slot(f"carry{j}") for j in range(carried)), tuple(slot(f"next{j}") for j in range(carried)),
                    slot("iteration"), slot("flag"), slot("flag_out"), tuple(ref(v) for v in node.outputs[:carried]),
                    tuple((ref(v), s) for v, s in zip(scans, steps)), ref(node.outputs[carried + num_scans]),
                    int(node.attr("trip_bound")), label, initial_nbytes=tuple(t.nbytes for t in parts.initial),
                    growing=lengths)
