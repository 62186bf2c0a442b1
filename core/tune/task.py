"""Tuning tasks: one per distinct kernel workload of an optimized graph (anchor op, shapes, dtypes,
attrs, fused epilogue, target), keyed by the hash of its canonical JSON; weight = occurrences."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np

from ..lowering.executable import lower_group
from ..graph.ir import Graph, Node
from ..graph.ops import get_op, node_flops
from ..target import Target
from ..te.tensor import ComputeOp
from ..tir.stmt import PrimFunc
from .space import Config, ConfigSpace

if TYPE_CHECKING:
    from ..backends.base import Backend
from .templates import Template, anchor_stage, get_template


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return {"array": list(value.shape), "dtype": str(value.dtype), "sha1": hashlib.sha1(value.tobytes()).hexdigest()}
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)  # nested graphs and other objects: their text is part of the identity


def group_of(node: Node, graph: Graph) -> tuple[list[Node], Graph]:
    """The nodes one kernel computes (a Fused node's body) and the graph that types their values."""
    body = node.attr("body") if node.op == "Fused" else None
    return (list(body.nodes), body) if body is not None else ([node], graph)


def anchor_of(nodes: Sequence[Node]) -> Node:
    return max(nodes, key=lambda n: get_op(n.op).pattern)  # the op lower_group schedules the group by


def group_inputs(nodes: Sequence[Node]) -> list[str]:
    """The values a group reads from outside it, in the order of the kernel's input parameters."""
    produced = {o for n in nodes for o in n.outputs}
    return list(dict.fromkeys(i for n in nodes for i in n.inputs if i and i not in produced))


def workload(nodes: Sequence[Node], graph: Graph, outputs: Sequence[str], target: Target) -> dict:
    """What decides the kernel's code: input/output types, every op with its attrs, the target."""
    inputs = group_inputs(nodes)
    index = {v: f"in{k}" for k, v in enumerate(inputs)}
    index.update({o: f"v{k}" for k, o in enumerate(o for n in nodes for o in n.outputs)})
    types = lambda vs: [[list(graph.type_of(v).shape), graph.type_of(v).dtype] for v in vs]  # noqa: E731
    return {
        "anchor": anchor_of(nodes).op,
        "inputs": types(inputs), "outputs": types(outputs),
        "ops": [[n.op, [index.get(i, "") for i in n.inputs], [index[o] for o in n.outputs], _jsonable(dict(n.attrs))]
                for n in nodes],
        "epilogue": [n.op for n in nodes if n is not anchor_of(nodes)],
        "kernel_outputs": [index[o] for o in outputs],
        "target": [target.name, target.features, target.vector_bits],
    }


def workload_key(desc: dict) -> str:
    text = json.dumps(desc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


@dataclass(eq=False)
class Task:
    """One workload to tune. Holds the group itself, so candidates are the exact production kernel."""

    key: str
    desc: dict
    template: Template
    target: Target
    backend: "Backend"  # the target's, handed down: schedules, builds and runs the candidates
    nodes: tuple[Node, ...]
    graph: Graph
    outputs: tuple[str, ...]
    flops: int
    weight: int = 1
    constant_inputs: tuple[int, ...] = ()  # input parameters that are model weights (measured cold)
    _space: Optional[ConfigSpace] = field(default=None, repr=False)
    _anchor: Optional[ComputeOp] = field(default=None, repr=False)

    @property
    def name(self) -> str:
        shapes = "x".join(str(d) for d in self.desc["inputs"][0][0])
        epi = "+".join(self.desc["epilogue"])
        return f"{self.template.op}{'+' + epi if epi else ''}[{shapes}]#{self.key[:8]}"

    def _setup(self) -> None:
        captured: dict = {}

        def record(sch, outs, target):
            self.backend.schedule(self.template.op, target)(sch, outs, target)
            stage = anchor_stage(sch, outs, self.template)
            captured["op"], captured["default"] = stage.op, self.template.read_default(stage)

        lower_group(list(self.nodes), self.graph, self.target, self.backend, "probe", list(self.outputs),
                    anchor_schedule=record)
        space = self.template.define(captured["op"], self.target, captured["default"])
        space.default = space.from_values({k.name: captured["default"][k.name] for k in space.knobs})
        self._space, self._anchor = space, captured["op"]

    @property
    def space(self) -> ConfigSpace:
        if self._space is None:
            self._setup()
        return self._space

    @property
    def anchor_op(self) -> ComputeOp:
        if self._anchor is None:
            self._setup()
        return self._anchor

    def valid(self, config: Config) -> bool:
        return self.template.valid(config.values, self.anchor_op, self.target)

    def schedule_fn(self, values):
        return lambda sch, outs, target: self.template.apply(sch, outs, target, values)

    def instantiate(self, config: Optional[Config], name: Optional[str] = None) -> PrimFunc:
        """The kernel under `config` (None: the untuned default schedule)."""
        fn = None if config is None else self.schedule_fn(config.values)
        name = name or f"tune_{self.key[:8]}_{'default' if config is None else config.index}"
        func, _ = lower_group(list(self.nodes), self.graph, self.target, self.backend, name, list(self.outputs),
                              anchor_schedule=fn)
        return func


def group_task(node: Node, graph: Graph, target: Target, backend: "Backend") -> Optional[Task]:
    """The task of the kernel `node` becomes, or None when its anchor has no template or the backend builds the
    whole group's kernel itself (Backend.group_kernel). The backend's templates are loaded (extract_tasks)."""
    nodes, types = group_of(node, graph)
    template = get_template(anchor_of(nodes).op, target)
    outputs = list(node.outputs)
    if template is None or backend.group_kernel(nodes, types, target, "probe", outputs,
                                                group_inputs(nodes)) is not None:
        return None
    desc = workload(nodes, types, outputs, target)
    constants = tuple(k for k, v in enumerate(group_inputs(nodes)) if v in graph.constants)
    return Task(workload_key(desc), desc, template, target, backend, tuple(nodes), types, tuple(outputs),
                sum(node_flops(n, types) for n in nodes), constant_inputs=constants)


def extract_tasks(graph: Graph, target: Target, backend: "Backend") -> list[Task]:
    """Tasks of an optimized graph for `target` and its `backend`, heaviest (flops x weight) first; identical
    workloads share one."""
    backend.load_templates()
    tasks: dict[str, Task] = {}
    for node in graph.nodes:
        task = group_task(node, graph, target, backend)
        if task is None:
            continue
        if task.key in tasks:
            tasks[task.key].weight += 1
        else:
            tasks[task.key] = task
    return sorted(tasks.values(), key=lambda t: -t.flops * t.weight)
