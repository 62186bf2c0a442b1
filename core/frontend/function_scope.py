"""The values a subgraph imported as a graph of its own sees: its own, then the enclosing scopes' (captured on read)."""
from __future__ import annotations

from typing import Iterator, Mapping, MutableMapping

from core.graph.builder import GraphBuilder

from .structured_values import OptionalValue, SequenceValue, Value


BOUND_SUFFIX = "::bound"  # NAME::bound: [axis, valid length] of the data-dependent output NAME (bound_name)
SHAPE_SUFFIX = "::shape"  # NAME::shape: the actual shape of output NAME, decided by an If at run time (shape_name)


class ReadsRunTimeLength(Exception):
    """A subgraph to be compiled on its own reads an enclosing value whose length is known only at run time."""


class OuterValues(MutableMapping):
    """ONNX name -> value for a subgraph built by `builder` (an If branch, a Loop body run at run time). An
    enclosing value the subgraph reads becomes one more input of its graph (`inputs` lists the enclosing
    values so passed, in the graph's input order), or a copy of it when it is a constant; writes stay local."""

    def __init__(self, builder: GraphBuilder, outer_builder: GraphBuilder, outer_values: Mapping[str, Value]):
        self.builder, self.outer_builder, self.outer_values = builder, outer_builder, outer_values
        self.local: dict[str, Value] = {}
        self.captured: dict[str, str] = {}  # enclosing graph-IR value -> this graph's input or constant
        self.inputs: list[str] = []

    def __getitem__(self, key: str) -> Value:
        if key in self.local:
            return self.local[key]
        return self._capture(self.outer_values[key], key)

    def __contains__(self, key: object) -> bool:
        return key in self.local or key in self.outer_values

    def __setitem__(self, key: str, value: Value) -> None:
        self.local[key] = value

    def __delitem__(self, key: str) -> None:
        del self.local[key]

    def __iter__(self) -> Iterator[str]:
        yield from self.local
        yield from (k for k in self.outer_values if k not in self.local)

    def __len__(self) -> int:
        return len(set(self.local) | set(self.outer_values))

    def _capture(self, value: Value, key: str) -> Value:
        if isinstance(value, SequenceValue):
            return SequenceValue(tuple(self._capture(e, key) for e in value.elements), value.elem_dtype)
        if isinstance(value, OptionalValue):
            return OptionalValue(None if value.element is None else self._capture(value.element, key))
        if not value or value in self.captured:
            return self.captured.get(value, value)
        outer = self.outer_builder
        constant = outer.constant_value(value)
        if constant is not None:
            name = self.builder.add_constant(constant, value)
        else:
            if value in outer.bounds:
                raise ReadsRunTimeLength(f"a subgraph run at run time reads {key!r}, whose length is known only at "
                                         f"run time, from the enclosing graph")
            name = self.builder.add_input(self.builder.fresh_name(value), outer.type_of(value))
            self.inputs.append(value)
            if value in outer.runtime_ints:  # its largest value still sizes what it bounds (a TopK's k...)
                self.builder.runtime_ints[name] = outer.runtime_ints[value]
        self.captured[value] = name
        return name
