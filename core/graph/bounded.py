"""Run-time data-dependent sizes: a value computed at an upper-bound size carries its valid length along one axis.

NonZero, Compress, Unique, NonMaxSuppression and TopK with a run-time k write their results into an
upper-bound-sized buffer. Such a value is *bounded*: `GraphBuilder.bounds[value]` is a `Bound` (an int64
[1] value holding the valid length, and the static axis it applies to), or a `MultiBound` of several; what
lies past the length is unspecified padding. Input dims that run at a shape bucket's size with their actual
size as a run-time length are bounded values too (core/graph/length_inputs.py). Every op that reads a bounded value goes through its bound rule
(core/graph/bound_rules.py), which decides, per op:
  - ops that treat positions along the axis independently pass the bound on (the axis mapped through
    transposes, reshapes, gathers...);
  - ops that read across the axis get the padding masked first (a Where against the length: the
    neutral element of a reduction, -inf before a softmax or a top-k), and their result is unbounded
    or carries a new length (TopK: min(k, length); Concat along the axis compacts its parts);
  - anything else is refused with one clear error naming the op.
The masks are ordinary graph ops that fuse into the consumer's kernel, which thereby takes the length
as a run-time input. Small integer values computed from bounded shapes (Shape, Size, then Gather,
Slice, Min...) are *run-time ints* with a known largest value (`GraphBuilder.runtime_ints`), which is
how a TopK gets a run-time k."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.fold import fold_node
from core.graph.ir import TensorType

if TYPE_CHECKING:
    from core.graph.builder import GraphBuilder


@dataclass(frozen=True)
class Bound:
    length: str  # an int64 [1] value: how many entries along `axis` are valid
    axis: int


@dataclass(frozen=True)
class MultiBound:
    """Run-time lengths along several axes (attention scores: queries x keys, an image's height and width).
    Only the rules of core/graph/bound_rules_multi.py take it; code written for one axis that asks for
    `axis` or `length` gets a clear refusal instead of a silently wrong answer."""
    parts: tuple[Bound, ...]  # distinct axes, ascending

    @property
    def axis(self) -> int:
        raise ShapeError(f"a value with run-time lengths along axes {[p.axis for p in self.parts]} reaches an op "
                         f"that Kiln follows along one such axis only")

    length = axis


def parts_of(bound) -> tuple[Bound, ...]:
    """The per-axis Bounds of a Bound, a MultiBound or None."""
    if bound is None:
        return ()
    return bound.parts if isinstance(bound, MultiBound) else (bound,)


def combined(parts: Sequence[Bound]):
    """One Bound, a MultiBound (the first bound per axis wins) or None."""
    by_axis: dict[int, Bound] = {}
    for part in parts:
        by_axis.setdefault(part.axis, part)
    ordered = tuple(by_axis[a] for a in sorted(by_axis))
    return None if not ordered else ordered[0] if len(ordered) == 1 else MultiBound(ordered)


# -- values and masks -----------------------------------------------------------------------------
def set_bound(builder: "GraphBuilder", values: Sequence[str], bound: Optional[Bound]) -> list[str]:
    for value in values:
        if bound is not None:
            builder.bounds[value] = bound
    return list(values)


def length_constant(builder: "GraphBuilder", value: int) -> str:
    return builder.add_constant(np.array([value], np.int64), "length")


def arithmetic(builder: "GraphBuilder", op: str, a: str, b: str) -> str:
    return builder.add_unbounded_node(op, [a, b], 1, "length")[0]


def fill_value(dtype: str, lowest: bool):
    """The smallest (or largest) value of a dtype: the padding of a max (or min) reduction."""
    kind = np.dtype(dtype).kind
    if kind == "f":
        return -np.inf if lowest else np.inf
    if kind == "b":
        return not lowest
    info = np.iinfo(dtype)
    return info.min if lowest else info.max


def masked(builder: "GraphBuilder", value: str, fill, bound: Optional[Bound] = None) -> str:
    bound = bound or builder.bounds[value]
    ttype = builder.type_of(value)
    if np.size(fill) == 1 and builder.filled.get(value, {}).get(bound.axis) == (bound.length, float(np.asarray(fill))):
        return value  # holds that fill there already (a softmax's 0 past the keys it masked): no second pass
    positions = [1] * ttype.rank
    positions[bound.axis] = ttype.shape[bound.axis]
    iota = builder.add_constant(np.arange(ttype.shape[bound.axis], dtype=np.int64).reshape(positions), "position")
    length = builder.add_unbounded_node("Reshape", [bound.length], 1, "length", shape=(1,) * ttype.rank)[0]
    valid = builder.add_unbounded_node("Less", [iota, length], 1, "valid")[0]
    fill = np.array(fill).astype(ttype.dtype)
    fill_const = builder.add_constant(fill.reshape((1,) * ttype.rank) if fill.ndim == 0 else fill, "padding")
    out = builder.add_unbounded_node("Where", [valid, value, fill_const], 1, "masked")[0]
    builder.bounds[out] = builder.bounds.get(value, bound)  # masked along one axis, still bounded along all
    number = float(fill.reshape(-1)[0]) if fill.size == 1 else None
    # its reader needs the fill there; an axis masked before holds its own fill or this one (unknown when they
    # differ); the last axis is this mask's own (what the output holds whatever its input)
    earlier = {a: (n, f if f == number else None) for a, (n, f) in builder.filled.get(value, {}).items() if a != bound.axis}
    builder.filled[out] = {**earlier, bound.axis: (bound.length, number)}
    return out


def softmax_fills(builder: "GraphBuilder", data: str, outputs: Sequence[str], axis: int) -> None:
    """A Softmax of `data` filled with -inf past a length along its `axis` holds 0 there (exp(-inf - max), the
    kernel computing it writing its whole rows): a reader that would mask it with 0 (the attention weights before
    their product with the values) need not (`masked`)."""
    fill = builder.filled.get(data, {}).get(axis)
    if fill is not None and fill[1] == -np.inf:
        for value in outputs:
            builder.filled[value] = {**builder.filled.get(value, {}), axis: (fill[0], 0.0)}


def limit_length(builder: "GraphBuilder", values: Sequence[str], axis: int, length: str) -> None:
    """Makes `values` bounded along `axis` by `length` (the smaller of it and an existing bound there)."""
    for value in values:
        parts = list(parts_of(builder.bounds.get(value)))
        same = [k for k, part in enumerate(parts) if part.axis == axis]
        if same:
            parts[same[0]] = Bound(arithmetic(builder, "Min", parts[same[0]].length, length), axis)
        else:
            parts.append(Bound(length, axis))
        builder.bounds[value] = combined(parts)


def entry_minus(builder: "GraphBuilder", values: str, entry: int, subtrahend: int) -> str:
    """max(values[entry] - subtrahend, 0) as an int64 [1] value (a run-time slice's length)."""
    flat = builder.add_unbounded_node("Reshape", [values], 1, "length", shape=(builder.type_of(values).numel,))[0]
    item = builder.add_unbounded_node("Slice", [flat], 1, "length", starts=(entry,), steps=(1,), sizes=(1,))[0]
    rest = arithmetic(builder, "Sub", item, length_constant(builder, subtrahend))
    return arithmetic(builder, "Max", rest, length_constant(builder, 0))


def bound_pair(builder: "GraphBuilder", bound: Bound) -> str:
    """The `[axis, length]` int64 value of a bounded graph output (what the runtime trims by)."""
    key = (bound.length, bound.axis)
    if key not in builder.bound_pairs:
        axis = builder.add_constant(np.array([bound.axis], np.int64), "axis")
        builder.bound_pairs[key] = builder.add_unbounded_node("Concat", [axis, bound.length], 1, "bound", axis=0)[0]
    return builder.bound_pairs[key]


def select_bounded(builder: "GraphBuilder", flag: str, if_true: str, if_false: str) -> Optional[str]:
    """Where(flag, if_true, if_false) when a side has a data-dependent length (an If on a run-time condition
    whose branches differ along that axis, e.g. "no boxes: an empty result"): both sides padded to the
    longer one, the length picked by the flag too. None when the two cannot be lined up that way."""
    sides = [if_true, if_false]
    types = [builder.type_of(v) for v in sides]
    bounds = [builder.bounds.get(v) for v in sides]
    if types[0].rank != types[1].rank or types[0].dtype != types[1].dtype:
        return None
    differ = [a for a in range(types[0].rank) if types[0].shape[a] != types[1].shape[a]]
    axes = set(differ) | {b.axis for b in bounds if b is not None}
    if len(axes) != 1:
        return None
    (axis,) = axes
    longest = max(t.shape[axis] for t in types)
    lengths, padded = [], []
    for value, ttype, bound in zip(sides, types, bounds):
        lengths.append(bound.length if bound is not None else length_constant(builder, ttype.shape[axis]))
        pads = [0] * (2 * ttype.rank)
        pads[ttype.rank + axis] = longest - ttype.shape[axis]
        padded.append(builder.add_unbounded_node("Pad", [value], 1, "branch", pads=tuple(pads), mode="constant",
                                                 value=0.0)[0] if any(pads) else value)
    selected = builder.add_unbounded_node("Where", [flag] + padded, 1, "selected")[0]
    flag_1 = builder.add_unbounded_node("Reshape", [flag], 1, "flag", shape=(1,))[0]
    length = builder.add_unbounded_node("Where", [flag_1] + lengths, 1, "length")[0]
    builder.runtime_ints[length] = np.array([longest], np.int64)
    builder.bounds[selected] = Bound(length, axis)
    return selected


# -- run-time ints: shape arithmetic on bounded sizes ---------------------------------------------
# Ops whose result grows with their run-time operand (the others constant): folding them on the
# operands' largest values gives the result's largest value. value: which inputs may be run-time.
_POSITIONAL = {"Concat": None, "Gather": (0,), "Slice": (0,), "Reshape": (0,), "Expand": (0,), "Identity": (0,),
               "Transpose": (0,)}
_MONOTONE = {"Min": None, "Max": None, "Add": None, "Mul": None, "Sub": (0,), "Div": (0,), "ReduceMin": None,
             "ReduceMax": None, "ReduceSum": None, "Floor": (0,), "Ceil": (0,), "Round": (0,)}
# Ops whose result shrinks as these run-time operands grow, when every value involved is positive (a scale
# min(320 / shorter side, ...)): their largest value folds from those operands' smallest (runtime_smallest).
_DECREASING = {"Reciprocal": 0, "Div": 1, "Sub": 1}


def _operands(builder: "GraphBuilder", op: str, inputs: Sequence[str], attrs: Mapping) -> Optional[list[tuple]]:
    """Per input (its largest, its smallest or None, whether the result falls as it grows), or None when the op
    does not keep a largest value computable from its operands'."""
    decreasing = _DECREASING.get(op)
    if op == "Cast":
        allowed = (0,) if np.dtype(attrs["to"]).kind in "iuf" else ()
    elif op in _POSITIONAL or op in _MONOTONE or decreasing is not None:
        allowed = {**_POSITIONAL, **_MONOTONE}.get(op, ())
    else:
        return None
    operands = []
    for index, name in enumerate(inputs):
        constant = builder.constant_value(name)
        falls = index == decreasing
        if name in builder.runtime_ints and (falls or allowed is None or index in allowed):
            operands.append((builder.runtime_ints[name], builder.runtime_smallest.get(name), falls))
        elif constant is not None:
            if op in ("Mul", "Div") and (constant < (1 if op == "Div" and index == 1 else 0)).any():
                return None  # a negative factor (or a divisor below 1) turns the largest value into the smallest
            operands.append((constant, constant, False))
        else:
            return None
    if decreasing is not None and inputs[decreasing] in builder.runtime_ints:
        smallest = [low for _, low, _ in operands]
        if any(low is None or (np.asarray(low) <= 0).any() for low in smallest):
            return None  # 1 / x falls as x grows for positive x only
    return operands


def track_runtime_ints(builder: "GraphBuilder", op: str, inputs: Sequence[str], attrs: Mapping,
                       outputs: Sequence[str]) -> bool:
    """Records the largest value of a run-time int the node computes (builder.runtime_ints, and its smallest in
    builder.runtime_smallest where the operands' are known: a float scale computed from the sides); True when it
    is an arithmetic one, which may be a sum of run-time lengths (length_inputs.mark_sum_of_lengths)."""
    if len(outputs) != 1 or not any(i in builder.runtime_ints for i in inputs):
        return False
    if op == "Where":  # whichever side the run-time condition picks: the larger of the two largest values
        sides = [builder.runtime_ints.get(i, builder.constant_value(i)) for i in inputs[1:]]
        if all(side is not None for side in sides):
            builder.runtime_ints[outputs[0]] = np.broadcast_to(np.maximum(*sides), builder.type_of(outputs[0]).shape)
        return False
    operands = _operands(builder, op, inputs, attrs)
    if operands is None or any(falls and low is None for _, low, falls in operands):
        return False
    out_type = [builder.type_of(outputs[0])]
    arrays = [low if falls else high for high, low, falls in operands]
    if all(low is not None for _, low, _ in operands):
        (smallest,) = fold_node(op, [high if falls else low for high, low, falls in operands], attrs, out_type)
        builder.runtime_smallest[outputs[0]] = np.asarray(smallest)
    (largest,) = fold_node(op, arrays, attrs, [builder.type_of(outputs[0])])
    builder.runtime_ints[outputs[0]] = np.asarray(largest)
    if op not in _POSITIONAL:
        return True
    marked = [i for i, name in enumerate(inputs) if builder.shape_bounds.get(name) is not None]
    if not marked:
        return False
    # where the run-time lengths land: follow one marker per length through (Concat(seq, past + seq): two)
    lengths = []
    for index in marked:
        probe = np.array(arrays[index], copy=True).reshape(-1)
        for part in parts_of(builder.shape_bounds[inputs[index]]):
            probe[part.axis] = _MARKER - len(lengths)
            lengths.append(part.length)
        arrays[index] = probe.reshape(np.shape(arrays[index]))
    (moved,) = fold_node(op, arrays, attrs, [builder.type_of(outputs[0])])
    moved = np.asarray(moved).reshape(-1)
    parts = []
    for k, length in enumerate(lengths):
        places = np.flatnonzero(moved == _MARKER - k)
        if places.size == 1:
            parts.append(Bound(length, int(places[0])))
    if parts:
        builder.shape_bounds[outputs[0]] = combined(parts)
    return False


_MARKER = -(1 << 62)  # an impossible dimension




def static_part(builder: "GraphBuilder", op: str, inputs: Sequence[str], attrs: Mapping,
                out_types: Sequence[TensorType]) -> Optional[list[np.ndarray]]:
    """The value of a positional op (Gather, Slice...) on a run-time shape that only reads its static
    entries (Shape(x)[1] of a value bounded along axis 0), as constants; None otherwise."""
    marked = [i for i, name in enumerate(inputs) if builder.shape_bounds.get(name) is not None]
    if op == "Equal" and len(marked) == 1:
        return _never_a_length(builder, inputs, marked[0])
    if op not in _POSITIONAL or len(marked) != 1 or marked[0] not in (_POSITIONAL[op] or (marked[0],)) \
            or len(out_types) != 1 or any(
            builder.constant_value(n) is None for i, n in enumerate(inputs) if i != marked[0] and n):
        return None
    name = inputs[marked[0]]
    probe = np.array(builder.runtime_ints[name], copy=True).reshape(-1)
    for part in parts_of(builder.shape_bounds[name]):
        probe[part.axis] = _MARKER
    arrays = [probe.reshape(builder.runtime_ints[name].shape) if i == marked[0] else builder.constant_value(n)
              for i, n in enumerate(inputs)]
    (value,) = fold_node(op, arrays, attrs, out_types)
    return None if (np.asarray(value) <= _MARKER // 2).any() else [value]


def _never_a_length(builder: "GraphBuilder", inputs: Sequence[str], index: int) -> Optional[list[np.ndarray]]:
    """Equal(a run-time shape, constants) that is false wherever the shape holds a length, because the constant
    there is negative (torch's expand_as compares the shape with -1): the constant result; None otherwise."""
    shape, other = builder.runtime_ints[inputs[index]], builder.constant_value(inputs[1 - index])
    if other is None or other.shape != shape.shape or shape.ndim != 1:
        return None
    lengths = [p.axis for p in parts_of(builder.shape_bounds[inputs[index]])]
    if (other[lengths] >= 0).any():
        return None
    equal = shape == other
    equal[lengths] = False
    return [equal]


def shape_operand(builder: "GraphBuilder", value: str) -> Optional[tuple[tuple[int, ...], Optional[Bound]]]:
    """A shape computed at run time: (its largest value, which entry is which data-dependent length
    (`Bound.axis` = the entry), None when Kiln could not follow it), or None for other values."""
    if value not in builder.runtime_ints:
        return None
    return tuple(int(d) for d in builder.runtime_ints[value].reshape(-1)), builder.shape_bounds.get(value)


def bound_by_shape(builder: "GraphBuilder", value: str, shape: tuple[tuple[int, ...], Optional[Bound]]) -> None:
    """`value` was built at the largest value of a run-time shape: it is bounded by that shape's length."""
    largest, entry = shape
    if entry is None and value in builder.bounds:  # not followed, but only a bounded value spans it: its own bound
        return
    if entry is None:
        raise ShapeError(f"the shape {list(largest)} (at most) of {value!r} is computed from a data-dependent length "
                         f"in a way Kiln does not follow")
    for part in parts_of(entry):
        limit_length(builder, [value], part.axis + builder.type_of(value).rank - len(largest), part.length)


def runtime_shape(builder: "GraphBuilder", value: str, start: int, end: int) -> str:
    """Shape(value)[start:end] of a bounded value: its bounded dimensions are the run-time lengths."""
    shape = builder.type_of(value).shape
    inside = [p for p in parts_of(builder.bounds[value]) if start <= p.axis < end]
    if not inside:
        return builder.add_constant(np.array(shape[start:end], np.int64), "shape")
    parts, at = [], start
    for part in inside:
        if part.axis > at:
            parts.append(builder.add_constant(np.array(shape[at:part.axis], np.int64), "shape"))
        parts.append(part.length)
        at = part.axis + 1
    if at < end:
        parts.append(builder.add_constant(np.array(shape[at:end], np.int64), "shape"))
    result = parts[0] if len(parts) == 1 else builder.add_unbounded_node("Concat", parts, 1, "shape", axis=0)[0]
    builder.shape_bounds[result] = combined([Bound(p.length, p.axis - start) for p in inside])
    return result


def runtime_size(builder: "GraphBuilder", value: str) -> str:
    bound, ttype = builder.bounds[value], builder.type_of(value)
    per_entry = ttype.numel // ttype.shape[bound.axis] if ttype.shape[bound.axis] else 0
    size = arithmetic(builder, "Mul", bound.length, length_constant(builder, per_entry))
    return builder.add_unbounded_node("Reshape", [size], 1, "size", shape=())[0]
