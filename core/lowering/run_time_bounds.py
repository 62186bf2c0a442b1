"""Which kernels stop at run-time lengths, and the length inputs they take for it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..graph.ir import Graph, Node
from ..graph.length_inputs import LENGTH_SUM
from ..te.schedule import Schedule
from ..te.tensor import Tensor, placeholder
from ..tir.expr import IntImm


@dataclass(frozen=True)
class KernelBounds:
    """A kernel output whose points past a length input's value (along some axes) are padding that every reader
    masks (Graph.run_time_bounds, from core/graph/length_inputs.py), and a kernel input or output that holds one
    number past a length (a mask's output: Graph.run_time_fills), give the kernel those lengths as extra inputs;
    its stages stop their loops there (core/te/run_time_bounds.py)."""

    outputs: Mapping[str, tuple[tuple[int, str], ...]] = field(default_factory=dict)  # value -> ((axis, length), ...)
    # an input's ((axis, length, fill), ...); an output's (a mask's output) the last: its own mask, which it writes
    fills: Mapping[str, tuple[tuple[int, str, float], ...]] = field(default_factory=dict)
    # a kernel input or output laid out at its run-time lengths (Graph.run_time_layouts): value -> ((axis, length), ...)
    layouts: Mapping[str, tuple[tuple[int, str], ...]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.outputs or self.fills or self.layouts)

    def lengths(self) -> list[str]:
        """The lengths the bounds read: a length input, or length inputs and a constant joined by LENGTH_SUM (their
        sum)."""
        return list(dict.fromkeys([n for axes in self.outputs.values() for _, n in axes] +
                                  [n for axes in self.fills.values() for _, n, _ in axes] +
                                  [n for axes in self.layouts.values() for _, n in axes]))

    def length_inputs(self) -> list[str]:
        return list(dict.fromkeys(part for length in self.lengths() for part in length.split(LENGTH_SUM)
                                  if not part.isdigit()))

    def describe(self) -> str:
        """A memo key step (a bounded kernel differs from the same group's static one)."""
        layouts = (sorted((v, tuple(a)) for v, a in self.layouts.items()),) if self.layouts else ()
        return "run-time bounds " + repr((sorted((v, tuple(a)) for v, a in self.outputs.items()),
                                          sorted((v, tuple(a)) for v, a in self.fills.items())) + layouts)


NO_BOUNDS = KernelBounds()


def kernel_bounds(graph: Graph, nodes: Sequence[Node], inputs: Sequence[str], outputs: Sequence[str]) -> KernelBounds:
    """The run-time bounds of a kernel's `outputs` and fills of its `inputs` and `outputs` whose lengths are inputs of
    `graph` (what every call can pass). An output's fill counts when one of the kernel's `nodes` masks it (a Where
    writes the fill whatever it reads there); a value filled by its computation (a Softmax's 0) is computed whole."""
    bounds = getattr(graph, "run_time_bounds", None) or {}
    fills = getattr(graph, "run_time_fills", None) or {}
    filled = {i: fills[i] for i in inputs if i in fills}
    masks = {o for node in nodes if node.op == "Where" for o in node.outputs}
    filled.update({o: fills[o][-1:] for o in outputs if o in fills and o in masks})
    layouts = getattr(graph, "run_time_layouts", None) or {}
    known = lambda length: all(part in graph.inputs or part.isdigit() for part in length.split(LENGTH_SUM))  # noqa: E731
    return KernelBounds({o: bounds[o] for o in outputs if o in bounds and all(known(n) for _, n in bounds[o])},
                        {v: axes for v, axes in filled.items() if all(known(n) for _, n, _ in axes)},
                        {v: layouts[v] for v in dict.fromkeys([*inputs, *outputs]) if v in layouts})


def length_params(bounds: KernelBounds, inputs: Sequence[str]) -> list[str]:
    """The length inputs `bounds` reads that the kernel does not already take (its extra input parameters)."""
    return [length for length in bounds.length_inputs() if length not in inputs]


def bound_stages(sch: Schedule, tensors: dict[str, Tensor], bounds: KernelBounds, params: list[Tensor]) -> None:
    """Sets each bounded output's stage to stop at its lengths and tells the schedule which inputs hold a fill;
    adds a placeholder parameter per length the kernel does not read yet (`tensors`: value -> tensor, updated;
    `params`: the kernel's input tensors, appended)."""
    for k, length in enumerate(length_params(bounds, list(tensors))):
        tensors[length] = placeholder((1,), "int64", f"len{k}")
        params.append(tensors[length])
    reads = {}
    for length in bounds.lengths():  # a sum of lengths: one expression, which every stage bounded by it shares
        parts = [IntImm(int(part), "int64") if part.isdigit() else tensors[part](0) for part in length.split(LENGTH_SUM)]
        reads[length] = sum(parts[1:], parts[0])
    for value, axes in bounds.outputs.items():
        sch[tensors[value]].run_time_bounds = {axis: reads[length] for axis, length in axes}
    sch.run_time_fills = {id(tensors[value].op): {axis: (reads[length], fill) for axis, length, fill in axes}
                          for value, axes in bounds.fills.items() if value in tensors}
    sch.run_time_layouts = {id(tensors[value].op): {axis: reads[length] for axis, length in axes}
                            for value, axes in bounds.layouts.items() if value in tensors}


__all__ = ["KernelBounds", "NO_BOUNDS", "kernel_bounds", "length_params", "bound_stages"]
