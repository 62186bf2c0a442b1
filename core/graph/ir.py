"""The graph IR: typed values, nodes and graphs, all immutable.

A graph is a topologically ordered tuple of nodes over named values. Every value has a static
TensorType; values with known data (weights, folded shapes) live in `constants`. Passes are
functions `Graph -> Graph` that build new graphs instead of mutating old ones.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping

import numpy as np


class FrozenDict(dict):
    """A dict that refuses mutation and can be hashed, so nodes stay frozen and comparable."""

    def _refuse(self, *args, **kwargs):
        raise TypeError("FrozenDict is immutable")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted((k, _hashable(v)) for k, v in self.items())))

    def __reduce__(self):  # pickle rebuilds it whole rather than by item assignment
        return (type(self), (dict(self),))


def _hashable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    return value


def _freeze(value: Any) -> Any:
    """Lists become tuples (recursively) so that attributes are immutable and hashable."""
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    return value


@dataclass(frozen=True)
class TensorType:
    shape: tuple[int, ...]
    dtype: str  # numpy dtype name: "float32", "int64", "bool", ...

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype).name)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.numel * np.dtype(self.dtype).itemsize

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class Node:
    op: str
    inputs: tuple[str, ...]  # value names; "" marks an absent optional input
    outputs: tuple[str, ...]
    attrs: FrozenDict = field(default_factory=FrozenDict)
    name: str = ""

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        if not isinstance(self.attrs, FrozenDict):
            object.__setattr__(self, "attrs", FrozenDict({k: _freeze(v) for k, v in dict(self.attrs).items()}))

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def __str__(self) -> str:
        attrs = ", ".join(f"{k}={_show(v)}" for k, v in sorted(self.attrs.items()))
        return f"{', '.join(self.outputs)} = {self.op}({', '.join(self.inputs)}){' {' + attrs + '}' if attrs else ''}"


def _show(value: Any) -> str:
    """An attribute for printing: a nested graph (a Fused node's body) shows as its op list."""
    if isinstance(value, Graph):
        return "{" + "; ".join(str(n) for n in value.nodes) + "}"
    return str(value)


@dataclass(frozen=True)
class Graph:
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    nodes: tuple[Node, ...]
    types: Mapping[str, TensorType]
    constants: Mapping[str, np.ndarray]
    name: str = "model"
    # value -> ((axis, length input), ...): past that input's run-time length along the axis the value is
    # unspecified padding that every reader masks (core/graph/length_inputs.py), so its kernel may skip it
    run_time_bounds: Mapping[str, tuple[tuple[int, str], ...]] = field(default_factory=FrozenDict, compare=False)
    # a mask's output -> ((axis, length input, fill), ...): past the length along the axis it holds the fill
    run_time_fills: Mapping[str, tuple[tuple[int, str, float], ...]] = field(default_factory=FrozenDict, compare=False)
    # a graph input or output -> ((axis, length input), ...): laid out in memory at its run-time lengths along those
    # axes (the caller's own array, no padded copy: core/lowering/run_time_layouts.py)
    run_time_layouts: Mapping[str, tuple[tuple[int, str], ...]] = field(default_factory=FrozenDict, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "nodes", tuple(self.nodes))
        if not isinstance(self.types, FrozenDict):
            object.__setattr__(self, "types", FrozenDict(self.types))
        if not isinstance(self.constants, FrozenDict):
            object.__setattr__(self, "constants", FrozenDict(self.constants))

    def replace(self, **changes: Any) -> "Graph":
        return dataclasses.replace(self, **changes)

    def type_of(self, value: str) -> TensorType:
        return self.types[value]

    def producers(self) -> dict[str, Node]:
        return {out: node for node in self.nodes for out in node.outputs}

    def consumers(self) -> dict[str, list[Node]]:
        result: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in node.inputs:
                if name:
                    result.setdefault(name, []).append(node)
        return result

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def walk(self) -> Iterator[tuple[Node, "Graph"]]:
        """Every node with the graph that types its values, looking inside nested graphs (the
        body of a Fused node) instead of yielding the node that holds them."""
        for node in self.nodes:
            bodies = [v for v in node.attrs.values() if isinstance(v, Graph)]
            if bodies:
                for body in bodies:
                    yield from body.walk()
            else:
                yield node, self

    def __str__(self) -> str:
        lines = [f"graph {self.name}(" + ", ".join(f"{n}: {self.types[n]}" for n in self.inputs) + ") {"]
        for node in self.nodes:
            types = ", ".join(str(self.types[o]) for o in node.outputs if o in self.types)
            lines.append(f"  {node}  : {types}")
        lines.append("  return " + ", ".join(self.outputs))
        lines.append(f"}}  // {len(self.nodes)} nodes, {len(self.constants)} constants")
        return "\n".join(lines)


def topological_sort(nodes: Iterable[Node], available: Iterable[str]) -> tuple[Node, ...]:
    """Order nodes so every input is produced before use (stable: keeps the given order if valid)."""
    ready = set(available) | {""}
    pending = list(nodes)
    ordered: list[Node] = []
    while pending:
        progressed = False
        rest = []
        for node in pending:
            if all(i in ready for i in node.inputs):
                ordered.append(node)
                ready.update(node.outputs)
                progressed = True
            else:
                rest.append(node)
        if not progressed:
            missing = sorted({i for n in rest for i in n.inputs if i not in ready})
            raise ValueError(f"graph has a cycle or undefined values: {missing[:5]}")
        pending = rest
    return tuple(ordered)
