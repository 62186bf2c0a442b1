"""Where each entry of a run-time int vector comes from (a Resize's sizes, a Pad's pads built at run time).

Shape arithmetic builds such vectors from one-entry values (a side, a padding amount) by Concat, Reshape,
Slice, Transpose, Gather and integer Casts: following the entries through those positional ops (by folding
them on markers, as core/graph/bounded.py follows run-time lengths) names, per entry, the one-entry value
it holds or the constant it is. Also: the same length seen through reshapes and casts, and the largest and
smallest value of a run-time int (GraphBuilder.runtime_ints, runtime_smallest)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Union

import numpy as np

from core.graph.bounded import parts_of
from core.graph.fold import fold_node

if TYPE_CHECKING:
    from core.graph.builder import GraphBuilder

Entry = Union[int, str]  # a constant, or the one-entry value the entry holds

_POSITIONAL = ("Concat", "Reshape", "Slice", "Transpose", "Gather", "Identity", "Squeeze", "Unsqueeze")
_MARKER = -(1 << 61)  # below any size or padding amount


def entry_sources(builder: "GraphBuilder", value: str) -> Optional[list[Entry]]:
    """Per entry of `value` (flattened), its constant or the one-entry value it holds; None when an entry comes
    from a vector op Kiln does not follow here."""
    leaves: list[str] = []
    symbolic = _symbolic(builder, value, leaves, {})
    if symbolic is None:
        return None
    return [leaves[_MARKER - int(v)] if v <= _MARKER // 2 else int(v) for v in symbolic.reshape(-1)]


def _symbolic(builder: "GraphBuilder", value: str, leaves: list[str], seen: dict) -> Optional[np.ndarray]:
    if value in seen:
        return seen[value]
    constant = builder.constant_value(value)
    ttype = builder.type_of(value)
    result = None
    if constant is not None:
        result = np.asarray(constant).astype(np.int64) if np.dtype(ttype.dtype).kind in "iuf" else None
    else:
        node = builder.producer(value)
        casts = node is not None and node.op == "Cast" and np.dtype(node.attrs["to"]).kind in "iu"
        if node is not None and (node.op in _POSITIONAL or casts) and len(node.outputs) == 1:
            arrays = [_symbolic(builder, i, leaves, seen) if i else None for i in node.inputs]
            if all(a is not None for i, a in zip(node.inputs, arrays) if i):
                if casts:
                    result = arrays[0]
                else:
                    (folded,) = fold_node(node.op, arrays, node.attrs, [ttype.__class__(ttype.shape, "int64")])
                    result = np.asarray(folded)
        if result is None and ttype.numel == 1:
            leaves.append(value)
            result = np.full(ttype.shape, _MARKER - (len(leaves) - 1), np.int64)
    seen[value] = result
    return result


def same_length(builder: "GraphBuilder", value: str) -> str:
    """The value a one-entry int is under its reshapes and integer casts, and the run-time length an entry of a
    run-time shape is: two names of one length meet there."""
    while True:
        marked = parts_of(builder.shape_bounds.get(value))
        if len(marked) == 1 and marked[0].length != value and builder.type_of(value).numel == 1:
            value = marked[0].length
            continue
        node = builder.producer(value)
        if node is None or builder.type_of(value).numel != 1 or not (
                node.op in ("Reshape", "Identity", "Squeeze", "Unsqueeze")
                or (node.op == "Cast" and np.dtype(node.attrs["to"]).kind in "iuf")):
            return value
        value = node.inputs[0]


def int_length(builder: "GraphBuilder", value: str, largest: int) -> str:
    """A one-entry value as an int64 [1] length (what a Bound holds), its largest value recorded."""
    if builder.type_of(value).shape != (1,):
        value = builder.add_unbounded_node("Reshape", [value], 1, "length", shape=(1,))[0]
    if builder.type_of(value).dtype != "int64":
        value = builder.add_unbounded_node("Cast", [value], 1, "length", to="int64")[0]
    builder.runtime_ints.setdefault(value, np.array([largest], np.int64))
    return value


def extremes(builder: "GraphBuilder", value: str) -> tuple[Optional[float], Optional[float]]:
    """(smallest, largest) of a one-entry run-time int or constant, None where not known."""
    constant = builder.constant_value(value)
    if constant is not None:
        number = float(np.asarray(constant).reshape(-1)[0])
        return number, number
    low, high = builder.runtime_smallest.get(value), builder.runtime_ints.get(value)
    return (None if low is None else float(np.asarray(low).reshape(-1)[0]),
            None if high is None else float(np.asarray(high).reshape(-1)[0]))


__all__ = ["Entry", "entry_sources", "same_length", "int_length", "extremes"]
