"""Kernels that stop at run-time lengths: a kernel output whose points past a length input's value (along some
axes) are padding that every reader masks (Graph.run_time_bounds, from core/graph/length_inputs.py) gets those
lengths as extra kernel inputs, and its stage stops its loops there (core/te/run_time_bounds.py)."""
from __future__ import annotations

from typing import Mapping, Sequence

from ..graph.ir import Graph
from ..te.schedule import Schedule
from ..te.tensor import Tensor, placeholder

Bounds = Mapping[str, tuple[tuple[int, str], ...]]  # output -> ((axis, length input), ...)


def kernel_bounds(graph: Graph, outputs: Sequence[str]) -> dict[str, tuple[tuple[int, str], ...]]:
    """The run-time bounds of a kernel's `outputs` whose lengths are inputs of `graph` (what every call can pass)."""
    bounds = getattr(graph, "run_time_bounds", None) or {}
    return {o: bounds[o] for o in outputs if o in bounds and all(length in graph.inputs for _, length in bounds[o])}


def length_params(bounds: Bounds, inputs: Sequence[str]) -> list[str]:
    """The length inputs `bounds` reads that the kernel does not already take (its extra input parameters)."""
    return [length for length in dict.fromkeys(n for axes in bounds.values() for _, n in axes) if length not in inputs]


def bound_stages(sch: Schedule, tensors: Mapping[str, Tensor], bounds: Bounds, params: list[Tensor]) -> None:
    """Sets each bounded output's stage to stop at its lengths; adds a placeholder parameter per length the kernel
    does not read yet (`tensors`: value -> tensor, updated; `params`: the kernel's input tensors, appended)."""
    for k, length in enumerate(length_params(bounds, list(tensors))):
        tensors[length] = placeholder((1,), "int64", f"len{k}")
        params.append(tensors[length])
    reads = {length: tensors[length](0) for axes in bounds.values() for _, length in axes}
    for value, axes in bounds.items():
        sch[tensors[value]].run_time_bounds = {axis: reads[length] for axis, length in axes}


def describe(bounds: Bounds) -> str:
    """The bounds as a memo key step (a bounded kernel differs from the same group's static one)."""
    return "run-time bounds " + repr(sorted((value, tuple(axes)) for value, axes in bounds.items()))


__all__ = ["Bounds", "kernel_bounds", "length_params", "bound_stages", "describe"]
