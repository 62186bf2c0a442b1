"""Bound rules for values with run-time lengths along several axes (a MultiBound, core/graph/bounded.py):
attention scores are bounded along the queries and the keys, an image along its height and width. Each
rule maps every bounded axis on its own, masking the ones the op reads across; ops without a rule here
are refused by name (core/graph/bound_rules.py has the one-axis rules)."""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from core.graph.bound_rules import BoundedNode, reshaped_bound, scatter_past_lengths, sliced_bound
from core.graph.bounded import (Bound, MultiBound, arithmetic, combined, fill_value, length_constant, masked, parts_of,
                                set_bound, softmax_fills)
from core.graph.op_facts import Fact, elementwise_rule, op_rule, rule_for
from core.graph.ops import Pattern, get_op

MultiRule = Callable[[BoundedNode], list[str]]


def multi_rule(*ops: str) -> Callable[[MultiRule], MultiRule]:
    """Registers the several-axes rule of `ops`: their Fact.MULTI_BOUND (core/graph/op_facts.py)."""
    return op_rule(Fact.MULTI_BOUND, *ops)


def _parts(node: BoundedNode, index: int) -> tuple[Bound, ...]:
    return parts_of(node.bound(index))


def _elementwise(op: str) -> bool:
    return get_op(op).pattern in (Pattern.ELEMWISE, Pattern.BROADCAST) and op != "Expand"


def needs_multi(node: BoundedNode) -> bool:
    """A MultiBound input, or inputs of a broadcast or MatMul bounded along different (right-aligned) axes."""
    bounded = node.bounded()
    if any(isinstance(b, MultiBound) for _, b in bounded):
        return True
    if node.op != "MatMul" and not _elementwise(node.op):
        return False
    return len({b.axis - node.type(i).rank for i, b in bounded}) > 1


def add_multi_bounded_node(node: BoundedNode) -> list[str]:
    rule = rule_for(node.op, Fact.MULTI_BOUND)
    if rule is None:
        raise node.refuse("its input has run-time lengths along several axes, which Kiln follows through "
                          "elementwise ops, MatMul, Softmax, LayerNormalization, Transpose, Reshape, Slice, Split, "
                          "Gather, Concat (not along a run-time axis), reductions, Conv, pooling and RoiAlign only")
    return rule(node)


def _emit(node: BoundedNode, parts: Sequence[Bound], inputs=None) -> list[str]:
    outputs = node.emit(inputs)
    for value in outputs:
        bound = combined(parts)
        if bound is not None:
            node.builder.bounds[value] = bound
    return outputs


def _masked_along(node: BoundedNode, index: int, axes: Sequence[int], fill) -> str:
    value = node.inputs[index]
    for part in _parts(node, index):
        if part.axis in axes:
            value = masked(node.builder, value, fill, part)
    return value


# -- the rules ------------------------------------------------------------------------------------
@elementwise_rule(Fact.MULTI_BOUND)
def _broadcast(node: BoundedNode) -> list[str]:
    outputs = node.emit()
    out = node.builder.type_of(outputs[0])
    parts = []
    for index, bound in node.bounded():
        t = node.type(index)
        for part in parts_of(bound):
            mapped = part.axis + out.rank - t.rank
            if t.shape[part.axis] != out.shape[mapped]:
                raise node.refuse(f"it is broadcast to {out.shape[mapped]} entries")
            parts.append(Bound(part.length, mapped))
    return set_bound(node.builder, outputs, combined(parts))


@multi_rule("Expand")
def _expand(node: BoundedNode) -> list[str]:
    """A causal mask [1, 1, queries, keys] expanded over the batch: its bounded axes keep their sizes."""
    return _broadcast(node)


@multi_rule("MatMul")
def _matmul(node: BoundedNode) -> list[str]:
    ra, rb = node.type(0).rank, node.type(1).rank
    if ra < 2 or rb < 2:
        raise node.refuse("a matrix-vector product with run-time lengths along several axes")
    rank = max(ra, rb)
    inputs, parts = list(node.inputs), []
    for index, own, reduced, kept, lands in ((0, ra, ra - 1, ra - 2, rank - 2), (1, rb, rb - 2, rb - 1, rank - 1)):
        inputs[index] = _masked_along(node, index, (reduced,), 0)  # both sides: padding may hold inf or nan
        for part in _parts(node, index):
            if part.axis != reduced:
                parts.append(Bound(part.length, lands if part.axis == kept else part.axis + rank - own))
    return _emit(node, parts, inputs)


@multi_rule("Softmax", "LogSoftmax")
def _softmax(node: BoundedNode) -> list[str]:
    _data_only(node)
    data = _masked_along(node, 0, (node.attrs["axis"],), -np.inf)
    outputs = _emit(node, _parts(node, 0), [data])
    if node.op == "Softmax":
        softmax_fills(node.builder, data, outputs, node.attrs["axis"])
    return outputs


@multi_rule("LayerNormalization")
def _layer_norm(node: BoundedNode) -> list[str]:
    _data_only(node)
    if any(p.axis >= node.attrs["axis"] for p in _parts(node, 0)):
        raise node.refuse("it normalizes over a run-time axis")
    return _emit(node, _parts(node, 0))


@multi_rule("Transpose")
def _transpose(node: BoundedNode) -> list[str]:
    _data_only(node)
    perm = list(node.attrs["perm"])
    return _emit(node, [Bound(p.length, perm.index(p.axis)) for p in _parts(node, 0)])


@multi_rule("Reshape")
def _reshape(node: BoundedNode) -> list[str]:
    _data_only(node)
    parts = _parts(node, 0)
    merge = _merged_range(node, parts)
    if merge is not None:
        return _compacted_merge(node, parts, *merge)
    moved = [reshaped_bound(node, p, [o.axis for o in parts if o is not p]) for p in parts]
    if len({p.axis for p in moved}) != len(moved):
        raise node.refuse("the reshape merges two run-time axes")
    return _emit(node, moved)


def _merged_range(node: BoundedNode, parts: Sequence[Bound]) -> Optional[tuple[int, int]]:
    """(first, end) when the reshape merges input axes first..end-1 into one and keeps the others, and a run-time
    axis inside that range has others before it (an image's height x width x anchors flattened into one axis)."""
    shape, new = node.type(0).shape, tuple(node.attrs["shape"])
    for first in range(len(shape)):
        end = first + len(shape) - len(new) + 1
        merged = shape[:first] + (int(np.prod(shape[first:end])),) + shape[end:]
        if end <= first + 1 or end > len(shape) or new != merged:
            continue
        inside = [p.axis for p in parts if first <= p.axis < end]
        if inside and (len(inside) > 1 or inside[0] != first):
            return first, end
    return None


def _compacted_merge(node: BoundedNode, parts: Sequence[Bound], first: int, end: int) -> list[str]:
    """The merged axis laid out as the model at its actual lengths would: compacted position p splits into digits
    by the run-time lengths (static sizes elsewhere), innermost last, read from where those digits sit in the
    padded layout (one gather); valid up to the product of the lengths."""
    b = node.builder
    shape = node.type(0).shape
    merged = int(np.prod(shape[first:end]))
    flat = b.add_unbounded_node("Reshape", [node.inputs[0]], 1, node.hint, shape=(
        int(np.prod(shape[:first])), merged, int(np.prod(shape[end:]))))[0]
    lengths = {p.axis: p.length for p in parts}
    rest = b.add_constant(np.arange(merged, dtype=np.int64), "position")
    source, count, stride = None, None, 1
    for axis in reversed(range(first, end)):
        if axis in lengths:
            radix = arithmetic(b, "Max", lengths[axis], length_constant(b, 1))  # an empty axis: no / 0
            extent = lengths[axis]
        else:
            radix = extent = length_constant(b, shape[axis])
        above = arithmetic(b, "Div", rest, radix)
        digit = arithmetic(b, "Sub", rest, arithmetic(b, "Mul", above, radix))
        term = arithmetic(b, "Mul", digit, length_constant(b, stride))
        source = term if source is None else arithmetic(b, "Add", source, term)
        count = extent if count is None else arithmetic(b, "Mul", count, extent)
        rest, stride = above, stride * shape[axis]
    valid = arithmetic(b, "Less", b.add_constant(np.arange(merged, dtype=np.int64), "position"), count)
    source = b.add_unbounded_node("Where", [valid, source, length_constant(b, 0)], 1, "source")[0]
    gathered = b.add_unbounded_node("Gather", [flat, source], 1, node.hint, axis=1)[0]
    outputs = b.add_unbounded_node("Reshape", [gathered], 1, node.hint, shape=tuple(node.attrs["shape"]))
    b.runtime_ints[count] = np.array([merged], np.int64)
    moved = [Bound(count, first)] + [Bound(p.length, p.axis if p.axis < first else p.axis - (end - first) + 1)
                                     for p in parts if not first <= p.axis < end]
    return set_bound(b, outputs, combined(moved))


@multi_rule("Slice")
def _slice(node: BoundedNode) -> list[str]:
    _data_only(node)
    return _emit(node, [sliced_bound(node, p) for p in _parts(node, 0)])


@multi_rule("Gather")
def _gather(node: BoundedNode) -> list[str]:
    axis, index_rank = node.attrs["axis"], node.type(1).rank
    parts = [Bound(p.length, p.axis if p.axis < axis else p.axis + index_rank - 1)
             for p in _parts(node, 0) if p.axis != axis]  # along the gathered axis the indices pick valid entries
    parts += [Bound(p.length, axis + p.axis) for p in _parts(node, 1)]
    indices = _masked_along(node, 1, range(node.type(1).rank), 0)  # padding indices read entry 0
    return _emit(node, parts, [node.inputs[0], indices])


@multi_rule("Concat")
def _concat(node: BoundedNode) -> list[str]:
    axis = node.attrs["axis"]
    parts = [p for index, _ in node.bounded() for p in _parts(node, index)]
    if any(p.axis == axis for p in parts):
        raise node.refuse("it joins along one of several run-time axes")
    return _emit(node, parts)


_REDUCE_FILL = {"ReduceSum": lambda dtype: 0, "ReduceProd": lambda dtype: 1,
                "ReduceMax": lambda dtype: fill_value(dtype, True), "ReduceMin": lambda dtype: fill_value(dtype, False)}


@multi_rule(*_REDUCE_FILL, "ReduceMean")
def _reduce(node: BoundedNode) -> list[str]:
    _data_only(node)
    axes, keep = tuple(node.attrs["axes"]), node.attrs["keepdims"]
    parts = _parts(node, 0)
    if node.op == "ReduceMean" and any(p.axis in axes for p in parts):
        raise node.refuse("a mean over one of several run-time axes")
    inputs = [_masked_along(node, 0, axes, _REDUCE_FILL[node.op](node.type(0).dtype))] \
        if node.op in _REDUCE_FILL else None
    kept = [Bound(p.length, p.axis if keep else p.axis - sum(1 for a in axes if a < p.axis))
            for p in parts if p.axis not in axes]
    return _emit(node, kept, inputs)


@multi_rule("ScatterND")
def _scatter_nd(node: BoundedNode) -> list[str]:
    """x[:, :, :, :n] = y as torch exports it (index tuples of a grid bounded along queries and keys): the
    tuples past any length go to the spare slot; the updates' entries line up with the tuples."""
    last = node.type(1).rank - 1
    entries = [*_parts(node, 1), *_parts(node, 2)]
    if any(part.axis >= last for part in entries):
        raise node.refuse("the index tuples or the updated slices have a data-dependent length")
    return scatter_past_lengths(node, parts_of(combined(entries)), node.bound(0))


@op_rule(Fact.BOUND, "Trilu")
@multi_rule("Trilu")
def _trilu(node: BoundedNode) -> list[str]:
    """A causal mask (triu of a [queries, past + queries] fill): which entries it keeps depends on their absolute
    positions only, which the padding past each length does not move, so every bound passes through."""
    _data_only(node)
    return _emit(node, _parts(node, 0))


def _data_only(node: BoundedNode) -> None:
    if any(index for index, _ in node.bounded()):
        raise node.refuse("only its data input may have run-time lengths along several axes")


__all__ = ["add_multi_bounded_node", "needs_multi", "multi_rule"]
