"""Ahead-of-time executor: turns an optimized graph into kernels plus a static call plan.

Each group of nodes (one node per group until the fusion pass forms larger ones) becomes one
kernel; every kernel argument is bound once to a model input, output, weight or arena slot.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from .codegen.model_entry import BufferRef, KernelCall, ModelPlan
from .graph.ir import Graph, Node
from .graph.memory import Lifetime, MemoryPlan, align, plan_memory
from .graph.ops import get_op
from .kernels.registry import get_compute, get_schedule
from .target import Target
from .te.lower import lower
from .te.schedule import create_schedule
from .te.tensor import Tensor, placeholder
from .tir.stmt import PrimFunc


@dataclass(frozen=True)
class KernelInfo:
    name: str
    ops: tuple[str, ...]
    nodes: tuple[str, ...]
    flops: int
    inputs: tuple[str, ...]  # graph value names bound to the kernel's inputs
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class Executable:
    funcs: tuple[PrimFunc, ...]
    plan: ModelPlan
    weights: bytes
    kernels: tuple[KernelInfo, ...]
    memory: MemoryPlan


def _flops(node: Node, graph: Graph) -> int:
    """Multiply-adds count twice; other ops count one operation per output element."""
    out = graph.type_of(node.outputs[0])
    if node.op == "Conv":
        w = graph.type_of(node.inputs[1])
        return 2 * out.numel * int(np.prod(w.shape[1:]))
    if node.op == "MatMul":
        return 2 * out.numel * graph.type_of(node.inputs[0]).shape[-1]
    return sum(graph.type_of(o).numel for o in node.outputs)


def _kernel_name(index: int, nodes: Sequence[Node]) -> str:
    ops = "_".join(dict.fromkeys(n.op.lower() for n in nodes))[:40]
    return f"k{index:03d}_{re.sub(r'[^a-z0-9_]', '', ops)}"


def lower_group(nodes: Sequence[Node], graph: Graph, target: Target, name: str, outputs: Sequence[str]):
    """One kernel for `nodes`: their computes chained, scheduled by the group's main (anchor) op."""
    produced = {o for n in nodes for o in n.outputs}
    inputs = list(dict.fromkeys(i for n in nodes for i in n.inputs if i and i not in produced))
    tensors: dict[str, Tensor] = {}
    params: list[Tensor] = []
    for k, value in enumerate(inputs):
        t = graph.type_of(value)
        tensors[value] = placeholder(t.shape, t.dtype, f"in{k}")
        params.append(tensors[value])
    for node in nodes:
        ins = [tensors[i] if i else None for i in node.inputs]
        outs = get_compute(node.op)(ins, node.attrs, [graph.type_of(o) for o in node.outputs])
        tensors.update(zip(node.outputs, outs))
    out_tensors = [tensors[o] for o in outputs]
    sch = create_schedule(out_tensors)
    anchor = max(nodes, key=lambda n: get_op(n.op).pattern)
    for node in nodes:  # every stage but the anchor's is computed inline, in the anchor's loops
        if node is not anchor:
            for o in node.outputs:
                if o not in outputs:
                    sch[tensors[o]].compute_inline()
    get_schedule(anchor.op, target)(sch, [tensors[o] for o in anchor.outputs], target)
    return lower(sch, params + out_tensors, name, num_outputs=len(out_tensors)), inputs


def build_executable(graph: Graph, target: Target, groups: Optional[Sequence[Sequence[Node]]] = None) -> Executable:
    groups = [list(g) for g in groups] if groups is not None else [[n] for n in graph.nodes]
    consumers = graph.consumers()
    graph_outputs = set(graph.outputs)

    funcs: list[PrimFunc] = []
    infos: list[KernelInfo] = []
    for k, nodes in enumerate(groups):
        members = {id(n) for n in nodes}
        outputs = [o for n in nodes for o in n.outputs
                   if o in graph_outputs or any(id(c) not in members for c in consumers.get(o, []))]
        name = _kernel_name(k, nodes)
        func, inputs = lower_group(nodes, graph, target, name, outputs)
        funcs.append(func)
        infos.append(KernelInfo(name, tuple(n.op for n in nodes), tuple(n.name for n in nodes),
                                sum(_flops(n, graph) for n in nodes), tuple(inputs), tuple(outputs)))

    # Weights: every constant a kernel reads, packed 64-byte aligned in first-use order.
    weight_offsets: dict[str, int] = {}
    blob = bytearray()
    for info in infos:
        for value in info.inputs:
            if value in graph.constants and value not in weight_offsets:
                data = np.ascontiguousarray(graph.constants[value], dtype=graph.type_of(value).dtype).tobytes()
                blob.extend(b"\0" * (align(len(blob)) - len(blob)))
                weight_offsets[value] = len(blob)
                blob.extend(data)

    # Arena: intermediate values (live from producer to last consumer) and per-kernel workspaces.
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for k, info in enumerate(infos):
        for v in info.outputs:
            first.setdefault(v, k)
            last[v] = max(last.get(v, k), k)
        for v in info.inputs:
            last[v] = max(last.get(v, k), k)
    lifetimes = [Lifetime(v, graph.type_of(v).nbytes, first[v], last[v])
                 for v in first if v not in graph_outputs]
    lifetimes += [Lifetime(f"{f.name}/{b.name}", b.nbytes, k, k) for k, f in enumerate(funcs) for b in f.workspaces]
    memory = plan_memory(lifetimes)

    input_pos = {v: i for i, v in enumerate(graph.inputs)}
    output_pos = {v: i for i, v in enumerate(graph.outputs)}

    def ref(value: str) -> BufferRef:
        if value in output_pos:
            return BufferRef("output", index=output_pos[value])
        if value in input_pos:
            return BufferRef("input", index=input_pos[value])
        if value in weight_offsets:
            return BufferRef("weight", offset=weight_offsets[value])
        return BufferRef("arena", offset=memory.offsets[value])

    calls = []
    for func, info in zip(funcs, infos):
        args = [ref(v) for v in info.inputs] + [ref(v) for v in info.outputs]
        args += [BufferRef("arena", offset=memory.offsets[f"{func.name}/{b.name}"]) for b in func.workspaces]
        calls.append(KernelCall(func.name, tuple(args)))
    plan = ModelPlan(tuple(calls), len(graph.inputs), len(graph.outputs), memory.arena_bytes, len(blob))
    return Executable(tuple(funcs), plan, bytes(blob), tuple(infos), memory)
