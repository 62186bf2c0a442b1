"""GraphBuilder: assembles a Graph value by value, inferring types and folding all-constant nodes
eagerly, which is how ONNX shape subgraphs (Shape -> Gather -> Concat -> Reshape) vanish at import."""
from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.bound_dispatch import add_bounded_node
from core.graph.bounded import Bound, MultiBound, static_part, track_runtime_ints
from core.graph.fold import fold_node, worth_folding
from core.graph.ir import Graph, Node, TensorType, topological_sort
from core.graph.length_inputs import mark_sum_of_lengths
from core.graph.ops import get_op


def frozen_array(array) -> np.ndarray:
    """A contiguous read-only copy (no copy when the array already is one)."""
    value = np.asarray(array)
    if value.dtype == object:
        raise ShapeError("constants must be numeric or bool arrays, not Python objects")
    if value.flags.writeable or not value.flags.c_contiguous:
        value = np.array(value, copy=True, order="C")
        value.flags.writeable = False
    return value


class GraphBuilder:
    def __init__(self, name: str = "model"):
        self.name = name
        self._inputs: list[str] = []
        self._nodes: list[Node] = []
        self._types: dict[str, TensorType] = {}
        self._constants: dict[str, np.ndarray] = {}
        self._produced: set[str] = set()
        self._reserved: set[str] = set()
        self._outputs: list[str] | None = None
        # value -> its Bound (core/graph/bounded.py): how much of this upper-bound-sized value is valid
        # along which axis (data-dependent shapes: NonZero, Compress, Unique, NonMaxSuppression, TopK)
        self.bounds: dict[str, Bound] = {}
        # a mask's output -> axis -> (length, fill: a number or None) past which it holds the fill its reader needs
        self.filled: dict[str, dict[int, tuple[str, object]]] = {}
        self.runtime_ints: dict[str, np.ndarray] = {}  # int values computed from run-time lengths -> largest
        self.runtime_smallest: dict[str, np.ndarray] = {}  # those of them whose smallest value is known -> it
        self.bound_pairs: dict[tuple[str, int], str] = {}  # (length, axis) -> its [axis, length] value
        self.shape_bounds: dict[str, Bound | MultiBound] = {}  # run-time shape -> which entry (axis) is which length
        self.length_symbols: dict[str, str] = {}  # run-time length input -> its variable (length_inputs.py)
        self.length_floors: dict[str, int] = {}  # variable -> its smallest size (0 when not known)
        self.affine_lengths: dict = {}  # (value, id(symbols)) -> its affine_length, computed once
        # value -> its int64 [1 + rank] actual shape: an If output whose branches differ in shape (a graph output only)
        self.run_time_shapes: dict[str, str] = {}
        # merged length -> (per-row length, outer, inner): an axis merged from [outer, bounded, inner] and laid out
        # compactly (bound_rules._compacted_reshape), what a reshape back to those axes spreads out again
        self.merged_lengths: dict[str, tuple[str, int, int]] = {}

    # -- naming ------------------------------------------------------------------------------
    def reserve_names(self, names: Iterable[str]) -> None:
        """Keeps fresh names away from these, so they can later be given out by rename_value."""
        self._reserved.update(n for n in names if n)

    def has_value(self, name: str) -> bool:
        return name in self._types

    def fresh_name(self, hint: str) -> str:
        base = hint or "v"
        name, counter = base, 0
        while name in self._types or name in self._reserved:
            counter += 1
            name = f"{base}_{counter}"
        return name

    def _claim(self, name: str) -> None:
        if not name or name in self._types:
            raise ShapeError(f"value name {name!r} is empty or already defined")

    # -- values ------------------------------------------------------------------------------
    def add_input(self, name: str, ttype: TensorType) -> str:
        self._claim(name)
        self._inputs.append(name)
        self._types[name] = ttype
        return name

    def add_constant(self, array, name_hint: str = "const") -> str:
        value = frozen_array(array)
        name = self.fresh_name(name_hint)
        self._constants[name] = value
        self._types[name] = TensorType(value.shape, value.dtype.name)
        return name

    def type_of(self, name: str) -> TensorType:
        try:
            return self._types[name]
        except KeyError:
            raise ShapeError(f"value {name!r} is not defined") from None

    def constant_value(self, name: str) -> np.ndarray | None:
        return self._constants.get(name)

    def is_node_output(self, name: str) -> bool:
        return name in self._produced

    # -- nodes -------------------------------------------------------------------------------
    def add_node(self, op: str, inputs: Sequence[str], num_outputs: int = 1, name_hint: str = "",
                 foldable: bool = True, **attrs) -> list[str]:
        """Adds `op` (folded when its inputs are constants, unless not `foldable`: a DequantizeLinear of
        int8 weights stays a node so that the integer rewrite still sees the integers). An input with a
        data-dependent length takes the op through its bound rule (core/graph/bound_rules.py)."""
        read = [i for i in inputs if i in self.run_time_shapes]
        if read:
            raise ShapeError(f"{op} reads {read[0]!r}, the output of an If whose branches give it different shapes: "
                             f"only a graph output may have a shape known only at run time")
        if any(i in self.bounds for i in inputs if i):
            return add_bounded_node(self, op, list(inputs), num_outputs, name_hint, attrs)
        return self.add_unbounded_node(op, inputs, num_outputs, name_hint, foldable, **attrs)

    def add_unbounded_node(self, op: str, inputs: Sequence[str], num_outputs: int = 1, name_hint: str = "",
                           foldable: bool = True, **attrs) -> list[str]:
        """add_node without the bound rules: the inputs' bounds, if any, are the caller's business."""
        definition = get_op(op)
        inputs = list(inputs)
        while inputs and not inputs[-1]:
            inputs.pop()  # absent trailing optional inputs are simply left out
        types = [self.type_of(i) if i else None for i in inputs]
        draft = Node(op, tuple(inputs), (), attrs)  # Node freezes the attributes (lists -> tuples)
        out_types = definition.infer(types, draft.attrs)
        if len(out_types) != num_outputs:
            raise ShapeError(f"{op}: produces {len(out_types)} outputs, {num_outputs} requested")
        hint = name_hint or op.lower()
        arrays = [self._constants.get(i) if i else None for i in inputs]
        present = [a for i, a in zip(inputs, arrays) if i]
        if foldable and present and all(a is not None for a in present) and definition.fold is not None \
                and worth_folding(arrays, out_types):
            values = fold_node(op, arrays, draft.attrs, out_types)
            return [self.add_constant(v, hint) for v in values]
        static = static_part(self, op, inputs, draft.attrs, out_types) if self.shape_bounds else None
        if static is not None:  # the static entries of a run-time shape
            return [self.add_constant(v, hint) for v in static]
        outputs = []
        for ttype in out_types:
            name = self.fresh_name(hint)
            self._types[name] = ttype
            self._produced.add(name)
            outputs.append(name)
        self._nodes.append(dataclasses.replace(draft, outputs=tuple(outputs), name=name_hint))
        if self.runtime_ints and track_runtime_ints(self, op, inputs, draft.attrs, outputs):
            mark_sum_of_lengths(self, outputs[0])
        return outputs

    def add_identity(self, value: str, output_name: str) -> str:
        """An Identity node that is never folded: makes a constant or input a node-produced output."""
        self._claim(output_name)
        self._types[output_name] = self.type_of(value)
        self._produced.add(output_name)
        self._nodes.append(Node("Identity", (value,), (output_name,), name=output_name))
        return output_name

    def rename_value(self, old: str, new: str) -> str:
        """Gives a node-produced value a chosen name (graph outputs keep their ONNX names)."""
        if old == new:
            return new
        if old not in self._produced:
            raise ShapeError(f"only node outputs can be renamed, {old!r} is not one")
        self._claim(new)

        def swap(names: Iterable[str]) -> tuple[str, ...]:
            return tuple(new if n == old else n for n in names)

        self._nodes = [dataclasses.replace(n, inputs=swap(n.inputs), outputs=swap(n.outputs))
                       if old in n.inputs or old in n.outputs else n for n in self._nodes]
        self._types[new] = self._types.pop(old)
        self._produced.discard(old)
        self._produced.add(new)
        if self._outputs is not None:
            self._outputs = list(swap(self._outputs))
        return new

    # -- result ------------------------------------------------------------------------------
    def bound_value(self, value: str, bound: str, axis: int) -> None:
        """Marks `value` as data-dependent in size along `axis`: `bound` holds [axis, valid length]."""
        length = self.add_unbounded_node("Slice", [bound], 1, "length", starts=(1,), steps=(1,), sizes=(1,))[0]
        self.runtime_ints[length] = np.array([self.type_of(value).shape[axis]], np.int64)
        self.bounds[value] = Bound(length, axis)
        self.bound_pairs.setdefault((length, axis), bound)

    def producer_op(self, value: str) -> str:
        node = self.producer(value)
        return node.op if node is not None else ""

    def producer(self, value: str) -> Node | None:
        return next((node for node in self._nodes if value in node.outputs), None)

    def set_outputs(self, names: Sequence[str]) -> None:
        for name in names:
            self.type_of(name)
        self._outputs = list(names)

    def build(self) -> Graph:
        if self._outputs is None:
            raise ShapeError(f"graph {self.name}: outputs were never set")
        nodes = topological_sort(self._nodes, list(self._inputs) + list(self._constants))
        used = set(self._outputs) | {i for n in nodes for i in n.inputs if i}
        constants = {k: v for k, v in self._constants.items() if k in used}
        defined = set(self._inputs) | set(constants) | {o for n in nodes for o in n.outputs}
        types = {k: t for k, t in self._types.items() if k in defined}
        return Graph(self._inputs, self._outputs, nodes, types, constants, self.name)
