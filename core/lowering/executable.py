"""Ahead-of-time executor: turns an optimized graph into kernels plus a static call plan.

Each node becomes one kernel (a Fused node, the fusion pass's group, becomes one kernel for its
whole body); every kernel argument is bound once to a model input, output, weight or arena slot.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Optional, Sequence

import numpy as np

from ..codegen.kernel_cache import current_stats
from ..codegen.kernel_objects import build_jobs, objects_here, prefetch
from ..codegen.model_entry import BufferRef, KernelCall, ModelPlan
from ..graph.ir import Graph, Node
from .control_flow import ControlParts, control_call, is_control_node, prepare_control
from .inplace import inplace_input
from .memory import Lifetime, MemoryPlan, align, plan_memory
from .narrow_reads import scalar_reads, weight_widenings
from ..graph.ops import Pattern, get_op, node_flops
from ..process.fork_map import forked_map
from ..tir.kernel_dedup import note_digest, share_identical, structural_digest
from .lowering_memo import derived_key, group_key, recall, remember
from .run_time_bounds import NO_BOUNDS, KernelBounds, bound_stages, kernel_bounds, length_params
from .run_time_layouts import usable_layouts, without_layouts
from ..kernels.indexing import CHECKS_INDICES
from ..kernels.registry import ScheduleFn, get_compute
from ..target import Target
from ..te.lower import RunTimeLayoutError, lower
from ..te.schedule import create_schedule
from ..te.tensor import Tensor, placeholder
from ..tir.expr import Load
from ..tir.functor import rewrite_stmt, walk_expr, walk_stmt
from ..tir.stmt import PrimFunc, Store

if TYPE_CHECKING:
    from ..backends.base import Backend


@dataclass(frozen=True)
class KernelInfo:
    name: str
    ops: tuple[str, ...]
    nodes: tuple[str, ...]
    flops: int
    inputs: tuple[str, ...]  # graph value names bound to the kernel's inputs
    outputs: tuple[str, ...]
    func: str = ""  # the compiled function this kernel calls: its own name, or an identical earlier kernel's
    inplace: str = ""  # the input it reads from its output buffer (the caller fills the output with it first)


@dataclass(frozen=True)
class Executable:
    """`funcs` are the distinct compiled functions (identical kernels share one, core/tir/kernel_dedup.py);
    `kernels` has one entry per call, in call order, each naming the function it calls."""

    funcs: tuple[PrimFunc, ...]
    plan: ModelPlan
    weights: bytes
    kernels: tuple[KernelInfo, ...]
    memory: MemoryPlan
    # the graph inputs and outputs its kernels address at their run-time lengths (Graph.run_time_layouts)
    run_time_layouts: Mapping[str, tuple[tuple[int, str], ...]] = dataclasses.field(default_factory=dict)


def _kernel_name(index: int, nodes: Sequence[Node]) -> str:
    ops = "_".join(dict.fromkeys(n.op.lower() for n in nodes))[:40]
    return f"k{index:03d}_{re.sub(r'[^a-z0-9_]', '', ops)}"


def lower_group(nodes: Sequence[Node], graph: Graph, target: Target, backend: "Backend", name: str,
                outputs: Sequence[str], anchor_schedule: Optional[ScheduleFn] = None, widen_once: frozenset = frozenset(),
                bounds: KernelBounds = NO_BOUNDS):
    """One kernel for `nodes`: their computes chained, scheduled by the group's main (anchor) op
    (by `anchor_schedule` instead of the registry's when given: a tuned config, core/tune); `backend` (the
    target's, handed down) gives the schedules of ops without their own, the epilogue's and whole-group kernels.

    A complex or reduction anchor schedules its own stages with the kernel outputs as `outs`, so
    its final elementwise stage is inlined into the fused epilogue; the epilogue (what the group
    computes after the anchor) is then placed by `schedule_epilogue`. A group of injective ops is
    computed inline into its output stages, each scheduled by its own op. A half-size weight is widened inside
    its loads unless the kernel reads it as scalars: then once per call into a workspace (`widen_once`,
    core/lowering/narrow_reads.py). `bounds`: outputs that stop at run-time lengths and inputs filled past them
    (core/lowering/run_time_bounds.py), whose lengths the kernel takes after its inputs unless it reads them already."""
    inputs = group_inputs(nodes)
    whole = None if anchor_schedule else backend.group_kernel(nodes, graph, target, name, outputs, inputs)
    if whole is not None:  # a hand-built kernel (tuning never gives these groups a schedule: see group_task)
        if bounds.layouts:
            raise RunTimeLayoutError(f"{name}: a hand-built kernel addresses {', '.join(bounds.layouts)} at its "
                                     f"static layout")
        return whole, inputs
    tensors: dict[str, Tensor] = {}
    params: list[Tensor] = []
    for k, value in enumerate(inputs):
        t = graph.type_of(value)
        tensors[value] = placeholder(t.shape, t.dtype, f"in{k}")
        params.append(tensors[value])
    for node in nodes:
        ins = [tensors[i] if i else None for i in node.inputs]
        outs = get_compute(node.op, target.kind)(ins, node.attrs, [graph.type_of(o) for o in node.outputs])
        tensors.update(zip(node.outputs, outs))
    out_tensors = [tensors[o] for o in outputs]
    sch = create_schedule(out_tensors)
    anchor = max(nodes, key=lambda n: get_op(n.op).pattern)
    complex_anchor = len(nodes) > 1 and get_op(anchor.op).pattern >= Pattern.REDUCTION
    # A value no kernel output reads (Concat skips an empty part) has no stage: nothing to inline.
    staged = {id(stage.op) for stage in sch.stages}
    for node in nodes:  # every value but the kernel outputs is computed inline, in its reader's loops
        if node is anchor and complex_anchor:
            continue
        for o in node.outputs:
            if o not in outputs and o not in widen_once and id(tensors[o].op) in staged:
                sch[tensors[o]].compute_inline()

    def schedule_of(node: Node) -> ScheduleFn:
        return anchor_schedule if anchor_schedule is not None and node is anchor else backend.schedule(node.op, target)

    if complex_anchor:
        schedule_of(anchor)(sch, out_tensors, target)
        anchor_outs = {id(tensors[o].op) for o in anchor.outputs}
        epilogue = [t for t in out_tensors if id(t.op) not in anchor_outs]
        backend.epilogue_schedule()(sch, epilogue, target)
    else:
        for node in nodes:
            outs = [tensors[o] for o in node.outputs if o in outputs]
            if outs:
                schedule_of(node)(sch, outs, target)
    for value in widen_once:
        backend.schedule("Cast", target)(sch, [tensors[value]], target)
    if bounds:
        bound_stages(sch, tensors, bounds, params)
        inputs = inputs + length_params(bounds, inputs)
    func = lower(sch, params + out_tensors, name, num_outputs=len(out_tensors))
    widenings = weight_widenings(nodes, graph, inputs)
    if widenings:
        scalar = scalar_reads(func, [func.params[inputs.index(v)] for v in widenings.values()])
        more = {cast for cast, value in widenings.items() if func.params[inputs.index(value)] in scalar} - widen_once
        if more:
            return lower_group(nodes, graph, target, backend, name, outputs, anchor_schedule, widen_once | more, bounds)
    return func, inputs


def group_inputs(nodes: Sequence[Node]) -> list[str]:
    """The values a group reads from outside itself, in first-use order (its kernel's input parameters)."""
    produced = {o for n in nodes for o in n.outputs}
    return list(dict.fromkeys(i for n in nodes for i in n.inputs if i and i not in produced))


def _in_place_or_recall(func: PrimFunc, index: int, key: Optional[str]) -> Optional[PrimFunc]:
    """_read_from_output, remembered under the lowering's memo `key` when it gives a kernel."""
    key = derived_key(key, f"read input {index} from the output")
    found = recall(key, func.name)
    if found is None:
        found = _read_from_output(func, index)
        if found is not None:
            remember(key, found)
    return found


@dataclass(frozen=True)
class _KernelTask:
    """What lowering one kernel needs: its group, name, tuned schedule, memo key, the input it may read from its
    output (an index into its inputs; None: none) and the run-time lengths its loops stop at."""

    nodes: Sequence[Node]
    types: Graph
    outputs: Sequence[str]
    name: str
    tuned: Optional[ScheduleFn]
    key: Optional[str]
    inplace_index: Optional[int]
    bounds: KernelBounds = NO_BOUNDS

    def lower(self, target: Target, backend: "Backend", func: Optional[PrimFunc] = None) -> tuple[PrimFunc, Optional[int]]:
        """The kernel (`func`, or recalled, or lowered), and the index of the input it reads from its output (None:
        none)."""
        func = func or recall(self.key, self.name)
        if func is None:
            try:
                func, _ = lower_group(self.nodes, self.types, target, backend, self.name, self.outputs,
                                      anchor_schedule=self.tuned, bounds=self.bounds)
            except RunTimeLayoutError as err:  # build_executable lays these values out statically instead
                err.values = tuple(self.bounds.layouts)
                raise
            remember(self.key, func)
        if self.inplace_index is None:
            return func, None
        in_place = _in_place_or_recall(func, self.inplace_index, self.key)
        return (func, None) if in_place is None else (in_place, self.inplace_index)


def _lower_tasks(tasks: dict[int, _KernelTask], target: Target,
                 backend: "Backend") -> Iterator[tuple[int, tuple[PrimFunc, Optional[int]]]]:
    """(kernel index, what _KernelTask.lower gives) for each task, as each is ready: recalled here from the kernel
    cache, else lowered on forked workers when several must be (core/process/fork_map.py); each CPU kernel handed to
    codegen as soon as it is (`prefetch`). Groups with one memo key and in-place input are lowered once and renamed
    (repeated layers)."""
    first_of: dict[tuple, int] = {}
    copies: dict[int, list[int]] = {}
    for k, task in tasks.items():
        first = first_of.setdefault((task.key, task.inplace_index), k) if task.key is not None else k
        copies.setdefault(first, []).append(k)
    stats = current_stats()
    recalls = lambda: stats.lowered_from_cache if stats is not None else 0  # noqa: E731

    def lower_one(k: int) -> tuple:
        """The kernel and what else a forked worker does for it: its structural digest, its objects (CPU code), the
        recalls it made (a child's count in its own copy of the stats), and which process it ran in."""
        before = recalls()
        func, index = tasks[k].lower(target, backend)
        objects = objects_here(func, target) if backend.host_code else None
        return func, index, structural_digest(func), objects, recalls() - before, os.getpid()

    def ready() -> Iterator[tuple[int, tuple]]:
        nonlocal workers
        missing = []
        for k in copies:  # recalled here: unpickled once, not also pickled to and from a worker
            func = recall(tasks[k].key, tasks[k].name)
            if func is None:
                missing.append(k)
            else:
                func, index = tasks[k].lower(target, backend, func)
                yield k, (func, index, structural_digest(func), None, 0, os.getpid())
        workers = min(build_jobs(), len(missing)) if len(missing) > 1 else 1
        yield from forked_map(lower_one, missing, workers)

    workers = 1  # the processes that lower (and compile) the missing kernels
    for k, (func, index, digest, objects, recalled, pid) in ready():
        note_digest(func, digest)  # the copy unpickled here: deduplication and the kernel cache need not walk it
        if stats is not None and pid != os.getpid():
            stats.lowered_from_cache += recalled
        for copy in copies[k]:
            named = func if copy == k else dataclasses.replace(func, name=tasks[copy].name)
            if copy != k:
                note_digest(named, digest)
            if backend.host_code:  # taken as compiled, or compiled on another core while other kernels are lowered
                prefetch(named, target, objects, workers)
            yield copy, (named, index)


def _group_of(node: Node, graph: Graph) -> tuple[list[Node], Graph]:
    """The nodes one kernel computes, and the graph that types their values."""
    body = node.attr("body") if node.op == "Fused" else None
    return (list(body.nodes), body) if body is not None else ([node], graph)


def _read_from_output(func: PrimFunc, index: int) -> Optional[PrimFunc]:
    """The kernel without input `index`: it reads those elements from its single output buffer,
    which the caller binds to the input's memory (valid for elementwise kernels only). None when
    some store to the output does not read the input, such as a conv accumulating in the output
    buffer before its epilogue: it would overwrite the input too early."""
    src, dst = func.params[index], func.outputs[0]
    if not any(isinstance(stmt, Store) for stmt in walk_stmt(func.body)):  # a hand-built kernel's body says nothing
        return None
    for stmt in walk_stmt(func.body):
        if isinstance(stmt, Store) and stmt.buffer == dst and not any(
                isinstance(e, Load) and e.buffer == src for e in walk_expr(stmt.value)):
            return None
    body = rewrite_stmt(func.body, lambda e: Load(dst, e.index) if isinstance(e, Load) and e.buffer == src else None)
    params = func.params[:index] + func.params[index + 1:]
    return dataclasses.replace(func, params=params, body=body, num_inputs=func.num_inputs - 1)


def _index_checks(info: KernelInfo) -> str:
    """Who a kernel's failed index check names: its index-reading nodes, by op and the ONNX output they compute."""
    named = [f"{op} node of output '{name}'" for op, name in zip(info.ops, info.nodes) if op in CHECKS_INDICES]
    return ", ".join(named) + f" (kernel {info.name})" if named else ""


def build_executable(graph: Graph, target: Target, backend: "Backend", groups: Optional[Sequence[Sequence[Node]]] = None,
                     schedule_for: Optional[Callable[[str, Node], Optional[ScheduleFn]]] = None,
                     prefix: str = "") -> Executable:
    """Kernels for each node (a Fused node's body is one kernel) or for the given node groups, for `target` by
    its `backend` (handed down by the caller, never looked up here).
    `schedule_for(kernel name, node)` may return the anchor schedule of a node's kernel (tuning records).
    An If or Loop node calls its branches / body, each built the same way (kernels named `prefix`...)."""
    consumers = graph.consumers()
    graph_outputs = set(graph.outputs)

    def group_outputs(nodes: Sequence[Node]) -> list[str]:
        members = {id(n) for n in nodes}
        return [o for n in nodes for o in n.outputs
                if o in graph_outputs or any(id(c) not in members for c in consumers.get(o, []))]

    if groups is not None:
        work = [(list(g), graph, group_outputs(g)) for g in groups]
    else:
        work = []
        for node in graph.nodes:
            nodes, types = _group_of(node, graph)
            work.append((nodes, types, list(node.outputs)))

    graph = usable_layouts(graph, backend, [(nodes, outputs) for nodes, _, outputs in work])
    infos = [KernelInfo(prefix + _kernel_name(k, nodes), tuple(n.op for n in nodes), tuple(n.name for n in nodes),
                        sum(node_flops(n, types) for n in nodes), tuple(group_inputs(nodes)), tuple(outputs),
                        prefix + _kernel_name(k, nodes)) for k, (nodes, types, outputs) in enumerate(work)]
    # Arena: intermediate values (live from producer to last consumer) and per-kernel workspaces.
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for k, info in enumerate(infos):
        for v in info.outputs:
            first.setdefault(v, k)
            last[v] = max(last.get(v, k), k)
        for v in info.inputs:
            last[v] = max(last.get(v, k), k)

    funcs: list[Optional[PrimFunc]] = [None] * len(work)  # None: an If or Loop call (`controls`)
    controls: dict[int, ControlParts] = {}
    owners = list(graph.nodes) if groups is None else [None] * len(work)
    tasks: dict[int, _KernelTask] = {}
    for k, ((nodes, types, outputs), info) in enumerate(zip(work, infos)):
        if is_control_node(nodes):
            controls[k] = prepare_control(nodes[0], types, target, info.name,
                                          functools.partial(build_executable, backend=backend))
            continue
        tuned = schedule_for(info.name, owners[k]) if schedule_for and owners[k] is not None else None
        bounds = kernel_bounds(graph, nodes, info.inputs, outputs)  # kernels that stop at run-time lengths take them as inputs
        if bounds:
            info = infos[k] = dataclasses.replace(info, inputs=info.inputs + tuple(length_params(bounds, info.inputs)))
        # In place: a kernel whose single output is elementwise in an input that dies there reads that
        # input from the output's buffer (one parameter, so codegen's noalias promise still holds).
        dying = [v for v in info.inputs if v in first and v not in graph_outputs and last[v] == k]
        value = inplace_input(nodes, types, dying, info.outputs)
        if value is not None and info.outputs[0] in graph_outputs:
            value = None
        key = group_key(nodes, types, outputs, target) if tuned is None else None
        key = derived_key(key, bounds.describe()) if bounds else key
        tasks[k] = _KernelTask(nodes, types, outputs, info.name, tuned, key,
                               None if value is None else info.inputs.index(value), bounds)
    inplace: dict[str, str] = {}
    try:
        lowered = dict(_lower_tasks(tasks, target, backend))
    except RunTimeLayoutError as err:  # a kernel addresses these arguments at their static layout only: all do
        if not getattr(err, "values", ()):
            raise
        return build_executable(without_layouts(graph, err.values), target, backend, groups, schedule_for, prefix)
    for k in sorted(lowered):  # in kernel order, whatever order they were lowered in
        func, value_index = lowered[k]
        info = infos[k]
        if value_index is not None:
            value = info.inputs[value_index]
            inplace[info.outputs[0]] = value
            infos[k] = dataclasses.replace(info, inputs=tuple(v for v in info.inputs if v != value), inplace=value)
        funcs[k] = func
    lifetimes = [Lifetime(v, graph.type_of(v).nbytes, first[v], last[v])
                 for v in first if v not in graph_outputs]
    # Workspaces are per call (named by the kernel, not the possibly shared function).
    lifetimes += [Lifetime(f"{infos[k].name}/{b.name}", b.nbytes, k, k) for k, f in enumerate(funcs) if f is not None
                  for b in f.workspaces]
    lifetimes += [Lifetime(f"{infos[k].name}/{name}", nbytes, k, k) for k, parts in controls.items()
                  for name, nbytes in parts.slots]
    memory = plan_memory(lifetimes, inplace)

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

    def place_weights(data: bytes) -> int:
        blob.extend(b"\0" * (align(len(blob)) - len(blob)))
        offset = len(blob)
        blob.extend(data)
        return offset

    calls = []
    for k, (func, info) in enumerate(zip(funcs, infos)):
        if func is None:
            calls.append(control_call(controls[k], info.name, ref, lambda name, k=k: BufferRef(
                "arena", offset=memory.offsets[f"{infos[k].name}/{name}"]), place_weights))
            continue
        args = [ref(v) for v in info.inputs] + [ref(v) for v in info.outputs]
        args += [BufferRef("arena", offset=memory.offsets[f"{info.name}/{b.name}"]) for b in func.workspaces]
        calls.append(KernelCall(func.name, tuple(args), label=info.name, checks=_index_checks(info)))
    # Identical kernels (repeated layers, unrolled loops) are compiled once and called at each site.
    unique, called = share_identical([f for f in funcs if f is not None])
    shared = iter(called)
    called = [next(shared) if f is not None else info.func for f, info in zip(funcs, infos)]
    calls = [dataclasses.replace(c, func=f) if f is not None and isinstance(c, KernelCall) else c
             for c, f in zip(calls, called)]
    infos = [dataclasses.replace(info, func=f) for info, f in zip(infos, called)]
    unique += [f for parts in controls.values() for sub in parts.subs if sub is not None for f in sub.funcs]
    plan = ModelPlan(tuple(calls), len(graph.inputs), len(graph.outputs), memory.arena_bytes, len(blob))
    return Executable(tuple(unique), plan, bytes(blob), tuple(infos), memory, dict(graph.run_time_layouts))
