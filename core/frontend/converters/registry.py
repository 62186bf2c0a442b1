"""Opset-aware converter registry (`@converter("Softmax", since_version=13)`) and the context a
converter gets for one ONNX node; a converter returns one graph-IR value per ONNX output."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NoReturn, Sequence, Union

import numpy as np
import onnx

from core.errors import ShapeError
from core.graph.builder import GraphBuilder
from core.graph.ir import TensorType

from ..onnx_values import tensor_to_array

ConverterResult = Union[str, Sequence[str]]
ConverterFn = Callable[["ConvertContext"], ConverterResult]

_CONVERTERS: dict[tuple[str, str], list[tuple[int, ConverterFn]]] = {}


class UnsupportedFeature(Exception):
    """A supported op used in a way Kiln cannot compile (3-D quantized conv, packed attention, ...)."""


def canonical_domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def converter(op_type: str, since_version: int = 1, domain: str = "") -> Callable[[ConverterFn], ConverterFn]:
    def wrap(fn: ConverterFn) -> ConverterFn:
        versions = _CONVERTERS.setdefault((canonical_domain(domain), op_type), [])
        if any(v == since_version for v, _ in versions):
            raise ValueError(f"converter for {op_type} since opset {since_version} registered twice")
        versions.append((since_version, fn))
        versions.sort(key=lambda entry: entry[0], reverse=True)
        return fn

    return wrap


def accepts_structured(fn: ConverterFn) -> ConverterFn:
    """Marks a converter that takes sequence/optional inputs (others are refused them by the importer)."""
    fn.accepts_structured = True  # type: ignore[attr-defined]
    return fn


def find_converter(domain: str, op_type: str, opset: int) -> ConverterFn | None:
    for since, fn in _CONVERTERS.get((canonical_domain(domain), op_type), ()):
        if since <= opset:
            return fn
    return None


def supported_ops() -> dict[tuple[str, str], list[int]]:
    return {key: sorted(v for v, _ in entries) for key, entries in _CONVERTERS.items()}


@dataclass
class ConvertContext:
    builder: GraphBuilder
    node: onnx.NodeProto
    opset: int
    inputs: list[str]  # graph-IR value per ONNX input; "" where the optional input is absent
    attrs: dict[str, Any]
    outputs_used: list[bool]  # whether each ONNX output is consumed by a node or is a graph output
    # Sequence/optional inputs (structured_values), by input index; only converters marked with
    # @accepts_structured get them, and read them through value(). `scope` imports subgraphs
    # (If/Loop/Scan bodies) seeing this node's enclosing values.
    structured: dict[int, Any] = field(default_factory=dict)
    scope: Any = None

    # -- description -------------------------------------------------------------------------
    @property
    def op_type(self) -> str:
        return self.node.op_type

    @property
    def where(self) -> str:
        label = self.node.name or (self.node.output[0] if self.node.output else "")
        return f"{self.op_type} node {label!r}"

    def fail(self, message: str) -> NoReturn:
        raise ShapeError(f"{self.where}: {message}")

    def unsupported(self, reason: str) -> NoReturn:
        raise UnsupportedFeature(reason)

    # -- inputs and attributes ---------------------------------------------------------------
    def has_input(self, index: int) -> bool:
        return index in self.structured or (index < len(self.inputs) and bool(self.inputs[index]))

    def value(self, index: int) -> Any:
        """Input `index` as a tensor value name, a SequenceValue or an OptionalValue."""
        return self.structured[index] if index in self.structured else self.input(index)

    def input(self, index: int) -> str:
        if not self.has_input(index):
            self.fail(f"required input {index} is missing")
        if index in self.structured:
            self.fail(f"input {index} must be a tensor, not a sequence or optional")
        return self.inputs[index]

    def type_of(self, index: int) -> TensorType:
        return self.builder.type_of(self.input(index))

    def shape(self, index: int) -> tuple[int, ...]:
        return self.type_of(index).shape

    def constant(self, index: int, what: str) -> np.ndarray:
        value = self.builder.constant_value(self.input(index))
        if value is None:
            self.fail(f"{what} (input {index}) must be a constant: Kiln compiles static shapes and "
                      f"parameters only, and this one is computed at run time")
        return value

    def optional_constant(self, index: int, what: str) -> np.ndarray | None:
        return self.constant(index, what) if self.has_input(index) else None

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def attr_tensor(self, name: str) -> np.ndarray | None:
        value = self.attrs.get(name)
        return None if value is None else tensor_to_array(value, f"{self.where} attribute {name}")

    def output_used(self, index: int) -> bool:
        return index < len(self.outputs_used) and self.outputs_used[index]

    def reject_extra_outputs(self, supported: int, names: str) -> None:
        if any(self.output_used(i) for i in range(supported, len(self.outputs_used))):
            self.unsupported(f"only output {names} is supported")

    def axis(self, value: int, rank: int, name: str = "axis") -> int:
        value = int(value)
        if not -rank <= value < rank:
            self.fail(f"{name}={value} is out of range for rank {rank}")
        return value + rank if value < 0 else value

    # -- emitting ----------------------------------------------------------------------------
    @property
    def hint(self) -> str:
        return (self.node.output[0] if self.node.output else "") or self.node.name or self.op_type.lower()

    def emit(self, op: str, inputs: Sequence[str], num_outputs: int = 1, **attrs) -> list[str]:
        return self.builder.add_node(op, inputs, num_outputs, name_hint=self.hint, **attrs)

    def emit1(self, op: str, inputs: Sequence[str], **attrs) -> str:
        return self.emit(op, inputs, 1, **attrs)[0]

    def const(self, array, dtype: str | None = None) -> str:
        value = np.asarray(array, dtype=dtype)
        return self.builder.add_constant(value, self.hint + "_const")

    def scalar_like(self, value: float, like: str) -> str:
        """A 0-d constant of the same dtype as `like` (ONNX arithmetic needs matching dtypes)."""
        return self.const(np.asarray(value).astype(self.builder.type_of(like).dtype))

    def reshape(self, value: str, shape: Sequence[int]) -> str:
        if tuple(shape) == self.builder.type_of(value).shape:
            return value
        return self.emit1("Reshape", [value], shape=tuple(int(d) for d in shape))
