"""Input dims that run at a shape bucket's size with the actual size as a run-time length: the graph takes
one int64 [1] length per such dimension variable (after the model's own inputs), the inputs become bounded
values (core/graph/bounded.py, so the bound rules mask wherever the padding would leak), and each bounded
output's length is read back as a sum of the variables (what the runtime cuts the output to)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Optional, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.bounded import Bound, arithmetic, combined, length_constant, parts_of
from core.graph.ir import TensorType

if TYPE_CHECKING:
    from core.graph.builder import GraphBuilder

Affine = tuple[dict[str, int], int]  # {variable: coefficient}, constant


LENGTH_SUM = "+"  # joins the length inputs (and a constant, last) whose sum a run-time bound is (Graph.run_time_bounds,
# run_time_fills)


def length_input_name(variable: str) -> str:
    return f"{variable}::length"


def add_length_inputs(builder: "GraphBuilder", lengths: Mapping[str, Mapping[int, tuple[Sequence[str], int]]],
                      sizes: Mapping[str, int], floors: Optional[Mapping[str, int]] = None) -> dict[str, str]:
    """Adds the length input of each variable of `sizes` (its bucket size: the largest length) and bounds each
    input axis of `lengths` (input -> axis -> the variables whose sizes add up to that dim, plus a constant).
    `floors`: each variable's smallest size, where known. Returns the length inputs: value -> variable."""
    builder.length_floors.update(floors or {})
    symbols, values = {}, {}
    for variable, size in sizes.items():
        value = builder.add_input(length_input_name(variable), TensorType((1,), "int64"))
        builder.runtime_ints[value] = np.array([size], np.int64)
        builder.runtime_smallest[value] = np.array([builder.length_floors.get(variable, 0)], np.int64)
        symbols[value], values[variable] = variable, value
    builder.length_symbols.update(symbols)
    for name, axes in lengths.items():
        parts = []
        for axis, (variables, constant) in sorted(axes.items()):
            length = values[variables[0]]
            for other in variables[1:]:
                length = arithmetic(builder, "Add", length, values[other])
            if constant:
                length = arithmetic(builder, "Add", length, length_constant(builder, constant))
            builder.runtime_ints[length] = np.array([builder.type_of(name).shape[axis]], np.int64)
            parts.append(Bound(length, axis))
        if parts:
            builder.bounds[name] = combined(parts)
    return symbols


def affine_length(builder: "GraphBuilder", value: str, symbols: Mapping[str, str]) -> Optional[Affine]:
    """`value` (an int64 length) as a sum of the length inputs times constants plus a constant; None when it
    is not one (a min, a data-dependent count...)."""
    if value in symbols:
        return {symbols[value]: 1}, 0
    constant = builder.constant_value(value)
    if constant is not None:
        return ({}, int(constant.reshape(-1)[0])) if constant.size == 1 else None
    if builder.type_of(value).numel != 1:  # a length has one entry: no walk through a whole model's tensors
        return None
    key = (value, id(symbols))
    if key not in builder.affine_lengths:  # a graph's shape arithmetic shares its terms: each is followed once
        builder.affine_lengths[key] = _affine_of_node(builder, value, symbols)
    return builder.affine_lengths[key]


def _affine_of_node(builder: "GraphBuilder", value: str, symbols: Mapping[str, str]) -> Optional[Affine]:
    marked = parts_of(builder.shape_bounds.get(value))
    if len(marked) == 1 and marked[0].length != value and builder.type_of(value).numel == 1:
        # one entry of a run-time shape: that length (unless it is this value reshaped: a length of its own)
        own = builder.producer(marked[0].length)
        if own is not None and own.op == "Reshape" and own.inputs[0] == value:
            return None
        return affine_length(builder, marked[0].length, symbols)
    node = builder.producer(value)
    if node is None:
        return None
    if node.op in ("Reshape", "Identity") or (node.op == "Cast" and np.dtype(node.attrs["to"]).kind in "iu"):
        return affine_length(builder, node.inputs[0], symbols)
    terms = [affine_length(builder, i, symbols) for i in node.inputs]
    if node.op == "Neg" and terms[0] is not None:  # x[-n:]: a start counted from the end
        return {k: -v for k, v in terms[0][0].items()}, -terms[0][1]
    if len(terms) != 2 or None in terms:
        return None
    (a, ca), (b, cb) = terms
    if node.op in ("Add", "Sub"):
        sign = 1 if node.op == "Add" else -1
        coefs = dict(a)
        for k, v in b.items():
            coefs[k] = coefs.get(k, 0) + sign * v
        return {k: v for k, v in coefs.items() if v}, ca + sign * cb
    if node.op == "Mul" and (not a or not b):
        factor, (coefs, c) = (ca, (b, cb)) if not a else (cb, (a, ca))
        return {k: v * factor for k, v in coefs.items()}, c * factor
    if node.op in ("Max", "Min") and not a and not b:
        return {}, (max if node.op == "Max" else min)(ca, cb)
    if node.op == "Max" and (not a or not b):  # max(x, c) is x when x >= c for every length (lengths are >= 0)
        floor, (coefs, c) = (ca, (b, cb)) if not a else (cb, (a, ca))
        if all(v >= 0 for v in coefs.values()) and c >= floor:
            return coefs, c
    return None


def largest_length(builder: "GraphBuilder", value: str) -> Optional[int]:
    """The largest `value` takes when it is a sum of run-time lengths with non-negative coefficients."""
    affine = affine_length(builder, value, builder.length_symbols)
    if affine is None or any(c < 0 for c in affine[0].values()):
        return None
    sizes = {v: int(builder.runtime_ints[k].reshape(-1)[0]) for k, v in builder.length_symbols.items()}
    return affine[1] + sum(c * sizes[v] for v, c in affine[0].items())


def always_negative(builder: "GraphBuilder", value: str) -> bool:
    """Whether `value` is a sum of run-time lengths below 0 for every size in range (-new tokens: a slice start
    counted from the end)."""
    affine = affine_length(builder, value, builder.length_symbols) if builder.length_symbols else None
    if affine is None or any(c > 0 for c in affine[0].values()):
        return False
    return affine[1] + sum(c * builder.length_floors.get(v, 0) for v, c in affine[0].items()) < 0


def simplest_length(builder: "GraphBuilder", value: str) -> str:
    """`value` rebuilt from the length inputs when it is a sum of them (a KV cache's end - start is the new
    tokens' length itself): equal lengths then share one value, which the rules and the runtime follow."""
    affine = affine_length(builder, value, builder.length_symbols)
    if affine is None or any(c < 0 for c in affine[0].values()) or affine[1] < 0:
        return value
    inputs = {v: k for k, v in builder.length_symbols.items()}
    result = None
    for variable, coefficient in sorted(affine[0].items()):
        term = inputs[variable]
        if coefficient != 1:
            term = arithmetic(builder, "Mul", term, length_constant(builder, coefficient))
        result = term if result is None else arithmetic(builder, "Add", result, term)
    if result is None or affine[1]:
        constant = length_constant(builder, affine[1])
        result = constant if result is None else arithmetic(builder, "Add", result, constant)
    if result not in builder.runtime_ints and value in builder.runtime_ints:
        builder.runtime_ints[result] = builder.runtime_ints[value]
    return result


def skippable_bounds(builder: "GraphBuilder", symbols: Mapping[str, str]) -> dict[str, tuple[tuple[int, str], ...]]:
    """Per bounded value, the axes whose length is a length input or a sum of them (value -> ((axis, input), ...)):
    what a kernel computing it may leave unwritten past that length, since every reader masks it there (but a
    mask's own output, whose fill its reader needs)."""
    result: dict[str, tuple[tuple[int, str], ...]] = {}
    for value, bound in builder.bounds.items():
        axes = []
        for part in parts_of(bound):
            if part.axis in builder.filled.get(value, {}):  # a mask's fill, which its reader needs
                continue
            single = _single_input(builder, part.length, symbols)
            if single is not None:
                axes.append((part.axis, single))
        if axes:
            result[value] = tuple(axes)
    return result


def filled_values(builder: "GraphBuilder", symbols: Mapping[str, str]) -> dict[str, tuple[tuple[int, str, float], ...]]:
    """Per mask output, the axes it fills past one length input's value: value -> ((axis, input, fill: a number or
    None), ...), its own mask's axis last (a reduction that multiplies by a 0 fill may stop there, and the kernel
    computing it need not compute what its mask replaces: core/te/run_time_bounds.py)."""
    result: dict[str, tuple[tuple[int, str, float], ...]] = {}
    for value, axes in builder.filled.items():
        found = [(axis, single, fill) for axis, (length, fill) in sorted(axes.items())
                 if (single := _single_input(builder, length, symbols)) is not None]
        if found:
            result[value] = tuple(found)
    return result


def _single_input(builder: "GraphBuilder", length: str, symbols: Mapping[str, str]) -> Optional[str]:
    """The length input that `length` is, itself (through reshapes), or the length inputs it sums (a KV cache's
    past + new) plus a constant (past + 1 in a bucket whose new tokens are its one size), joined by LENGTH_SUM;
    or None."""
    affine = affine_length(builder, length, symbols)
    return None if affine is None else length_sum(affine, symbols)


def length_sum(affine: Affine, symbols: Mapping[str, str]) -> Optional[str]:
    """An affine length as the length inputs (and a constant, last, when not 0) it adds up, joined by LENGTH_SUM;
    None when it takes no input or subtracts one, or its constant is negative."""
    coefs, constant = affine
    if constant < 0 or not coefs or any(c <= 0 for c in coefs.values()):
        return None
    inputs = {v: k for k, v in symbols.items()}
    parts = [inputs[v] for v, c in sorted(coefs.items()) for _ in range(c)]
    return LENGTH_SUM.join(parts + ([str(constant)] if constant else []))


def skippable_outputs(lengths: Mapping[str, Mapping[int, Affine]], symbols: Mapping[str, str],
                      outputs: Sequence[str]) -> dict[str, tuple[tuple[int, str], ...]]:
    """skippable_bounds of the graph `outputs` whose length along an axis (`lengths`, output_lengths' answer) is a
    length input or a sum of them and a constant (length_sum's): the runtime cuts them there."""
    result = {}
    for name in outputs:
        axes = tuple((axis, total) for axis, affine in sorted(lengths.get(name, {}).items())
                     if (total := length_sum(affine, symbols)) is not None)
        if axes:
            result[name] = axes
    return result


def output_lengths(builder: "GraphBuilder", outputs: Mapping[str, str], symbols: Mapping[str, str]
                   ) -> dict[str, dict[int, Affine]]:
    """Per graph output (ONNX name -> value) with run-time lengths, per axis, its length (ShapeError when one
    is not a sum of the variables)."""
    result: dict[str, dict[int, Affine]] = {}
    for name, value in outputs.items():
        for part in parts_of(builder.bounds.get(value)):
            affine = affine_length(builder, part.length, symbols)
            if affine is None:
                raise ShapeError(f"output {name!r} axis {part.axis} has a run-time length that is not a sum of the "
                                 f"input lengths (it depends on the data)")
            result.setdefault(name, {})[part.axis] = affine
    return result


def mark_sum_of_lengths(builder: "GraphBuilder", value: str) -> None:
    """A one-entry int computed from run-time lengths (past + new tokens, a Cast of one) that is itself a sum of
    them is marked as that length, so that a shape built from it (T5's ones mask over past + new) is followed."""
    if not builder.length_symbols or builder.type_of(value).numel != 1 or value in builder.shape_bounds \
            or _MARKING in builder.shape_bounds:
        return
    affine = affine_length(builder, value, builder.length_symbols)
    if affine is None or not affine[0] or any(c < 0 for c in affine[0].values()) or affine[1] < 0:
        _mark_product_of_lengths(builder, value)
        return
    builder.shape_bounds[_MARKING] = None  # the sum's own Add nodes are not marked in turn
    try:
        length = simplest_length(builder, value)
    finally:
        del builder.shape_bounds[_MARKING]
    if builder.type_of(length).shape == (1,):
        builder.shape_bounds[value] = Bound(length, 0)


def _mark_product_of_lengths(builder: "GraphBuilder", value: str) -> None:
    """A one-entry int that is not a sum of the lengths but never negative (height x width x anchors: a product
    of them, at least 0 at every size in range) is a run-time length of its own: a shape built from it (the
    anchors' level ids) is bounded by it."""
    ttype, smallest = builder.type_of(value), builder.runtime_smallest.get(value)
    if ttype.dtype != "int64" or smallest is None or (np.asarray(smallest) < 0).any():
        return  # (int32 shape arithmetic stays unmarked: the markers that follow a length are int64)
    builder.shape_bounds[_MARKING] = None
    try:
        length = value
        if ttype.shape != (1,):
            length = builder.add_unbounded_node("Reshape", [value], 1, "length", shape=(1,))[0]
    finally:
        del builder.shape_bounds[_MARKING]
    builder.runtime_ints.setdefault(length, np.asarray(builder.runtime_ints[value]).reshape(1).astype(np.int64))
    builder.shape_bounds[value] = Bound(length, 0)


_MARKING = "::marking sums of lengths"  # a key no value has


__all__ = ["Affine", "LENGTH_SUM", "length_input_name", "add_length_inputs", "affine_length", "largest_length",
           "always_negative", "mark_sum_of_lengths", "simplest_length", "length_sum", "skippable_bounds", "filled_values",
           "skippable_outputs", "output_lengths"]
