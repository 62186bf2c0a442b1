"""ONNX sequence and optional values as the importer holds them: compile-time structures over graph-IR
tensor values, and how they are flattened into tensor graph inputs/outputs (`name::0`, `name::1`, ...).

Kiln compiles static shapes per input signature, so the number of elements of a sequence and whether
an optional holds a value are known at compile time. A sequence is then simply a tuple of tensor
values; there is no sequence type in the graph IR and no run-time list object. At the model boundary
a sequence input `x` of n tensors becomes the tensor inputs `x::0` ... `x::{n-1}` (core.backend
rewrites the model that way, once per structure), and a sequence output `y` becomes the tensor
outputs `y::0` ... (an empty one: no outputs; the caller rebuilds the list from the names). An
optional input holding a tensor is fed as `x::0` (one holding a sequence as its elements); an optional
output is its content under the same naming (a tensor keeps the name `y`), and an empty one is absent.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Union

ELEMENT_SEPARATOR = "::"


@dataclass(frozen=True)
class SequenceValue:
    """An ONNX sequence with a compile-time length: one graph-IR tensor value per element."""
    elements: tuple[str, ...]
    elem_dtype: str | None = None  # known even when empty (SequenceEmpty's dtype, a declared type)

    def __len__(self) -> int:
        return len(self.elements)


@dataclass(frozen=True)
class OptionalValue:
    """An ONNX optional whose presence is known at compile time; `element` is None when empty."""
    element: Union[str, SequenceValue, None]


Value = Union[str, SequenceValue, OptionalValue]  # a str is a graph-IR tensor value


def is_structured(value: object) -> bool:
    return isinstance(value, (SequenceValue, OptionalValue))


def kind_of(value: Value) -> str:
    return {SequenceValue: "a sequence", OptionalValue: "an optional"}.get(type(value), "a tensor")


def element_name(name: str, index: int) -> str:
    return f"{name}{ELEMENT_SEPARATOR}{index}"


def flatten(name: str, value: Value) -> list[tuple[str, str]]:
    """(boundary name, graph-IR tensor value) pairs that carry `value` across the model boundary."""
    if isinstance(value, OptionalValue):
        return [] if value.element is None else flatten(name, value.element)
    if isinstance(value, SequenceValue):
        return [(element_name(name, i), element) for i, element in enumerate(value.elements)]
    return [(name, value)]


def unflatten_sequence(name: str, results: Mapping[str, object]) -> list:
    """The list a sequence output `name` was flattened into (its elements are consecutive)."""
    elements, index = [], 0
    while element_name(name, index) in results:
        elements.append(results[element_name(name, index)])
        index += 1
    return elements


def flatten_reference(outputs: Mapping[str, object]) -> dict[str, object]:
    """A reference runtime's outputs (lists for sequences, None for empty optionals) under the names
    the compiled model gives them."""
    flat: dict[str, object] = {}
    for name, value in outputs.items():
        if isinstance(value, (list, tuple)):
            flat.update((element_name(name, i), element) for i, element in enumerate(value))
        elif value is not None:
            flat[name] = value
    return flat
