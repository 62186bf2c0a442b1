"""The bound rules: for each graph op, what it does with an input whose length along one axis is known
only at run time (core/graph/bounded.py). `GraphBuilder.add_node` sends every op with such an input
(through core/graph/bound_dispatch.py): each op's Fact.BOUND rule (core/graph/op_facts.py), the elementwise and
broadcast patterns by default, and a clear refusal naming the op for the rest."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.bounded import Bound, arithmetic, fill_value, length_constant, masked, set_bound, softmax_fills
from core.graph.ir import TensorType
from core.graph.op_facts import Fact, elementwise_rule, op_rule, rule_for

if TYPE_CHECKING:
    from core.graph.builder import GraphBuilder


@dataclass
class BoundedNode:
    """One op about to be added whose inputs include bounded values (what a rule sees)."""
    builder: "GraphBuilder"
    op: str
    inputs: list[str]
    attrs: dict
    num_outputs: int
    hint: str

    def type(self, index: int) -> TensorType:
        return self.builder.type_of(self.inputs[index])

    def bound(self, index: int) -> Optional[Bound]:
        return self.builder.bounds.get(self.inputs[index]) if index < len(self.inputs) else None

    def bounded(self) -> list[tuple[int, Bound]]:
        return [(i, b) for i in range(len(self.inputs)) if (b := self.bound(i)) is not None]

    def refuse(self, why: str) -> ShapeError:
        index, bound = self.bounded()[0]
        value = self.inputs[index]
        source = self.builder.producer_op(value) or "an op"
        return ShapeError(f"{self.op} cannot take {value!r} (input {index}), whose length along axis {bound.axis} "
                          f"is data-dependent (known only at run time, from {source} upstream): {why}")

    def emit(self, inputs: Optional[Sequence[str]] = None, **attrs) -> list[str]:
        return self.builder.add_unbounded_node(self.op, list(self.inputs if inputs is None else inputs),
                                               self.num_outputs, self.hint, **{**self.attrs, **attrs})

    def mask(self, index: int, fill, bound: Optional[Bound] = None) -> str:
        """Input `index` with its padding (by its own bound, or `bound`) replaced by `fill` (a reduction's
        neutral element...)."""
        return masked(self.builder, self.inputs[index], fill, bound)


Rule = Callable[[BoundedNode], list[str]]


def bound_rule(*ops: str) -> Callable[[Rule], Rule]:
    """Registers the one-axis rule of `ops`: their Fact.BOUND (core/graph/op_facts.py)."""
    return op_rule(Fact.BOUND, *ops)


def one_axis_rule(node: BoundedNode) -> Rule:
    """The rule of a node whose inputs are bounded along one axis (core/graph/bound_dispatch.py asks)."""
    rule = rule_for(node.op, Fact.BOUND)
    if rule is None:
        raise node.refuse("Kiln has no run-time-length rule for this op (those it has: elementwise ops, Shape, "
                          "Reshape, Transpose, Slice, Gather*, Scatter*, Concat, reductions, Softmax, TopK, ArgMax, "
                          "MatMul, CumSum, NonZero, Compress, NonMaxSuppression, RoiAlign, Conv, MaxPool, global "
                          "pools)")
    return rule


def _with_axis(bound: Bound, axis: Optional[int]) -> Optional[Bound]:
    return None if axis is None else Bound(bound.length, axis)


# -- the rules ------------------------------------------------------------------------------------
@elementwise_rule(Fact.BOUND)
def _broadcast(node: BoundedNode) -> list[str]:
    """Elementwise with numpy broadcasting: an input's axis lines up with the output's from the right."""
    outputs = node.emit()
    out = node.builder.type_of(outputs[0])
    axis, bound = None, None
    for index, b in node.bounded():
        t = node.type(index)
        mapped = b.axis + out.rank - t.rank
        if t.shape[b.axis] != out.shape[mapped]:
            raise node.refuse(f"it is broadcast to {out.shape[mapped]} entries")
        if axis is not None and mapped != axis:
            raise node.refuse("another input is data-dependent along another axis")
        axis, bound = mapped, bound or b
    return set_bound(node.builder, outputs, _with_axis(bound, axis))


def _only(node: BoundedNode) -> Bound:
    """The bound of the op's data input (input 0), the only one that may be bounded."""
    if node.bound(0) is None or len(node.bounded()) > 1:
        raise node.refuse("only its data input may have a data-dependent length")
    return node.bound(0)


@bound_rule("Transpose")
def _transpose(node: BoundedNode) -> list[str]:
    bound = _only(node)
    return set_bound(node.builder, node.emit(), Bound(bound.length, list(node.attrs["perm"]).index(bound.axis)))


@bound_rule("Reshape")
def _reshape(node: BoundedNode) -> list[str]:
    """The padding sits at the end of the axis, so the axis may keep its size, be merged with the axes
    after it (length x their sizes) or be split with its first part leading (length / the rest), as
    long as the axes before it multiply to the same."""
    bound = _only(node)
    split = _split_back(node, bound)
    if split is not None:
        return _spread_reshape(node, bound, *split)
    try:
        return set_bound(node.builder, node.emit(), reshaped_bound(node, bound))
    except ShapeError:
        merged = _merged_behind(node, bound)
        if merged is None:
            raise
        return _compacted_reshape(node, bound, *merged)


def _merged_behind(node: BoundedNode, bound: Bound) -> Optional[tuple[int, int, int]]:
    """(first, end, axis) when the reshape merges input axes first..end-1, the data-dependent one after the
    first, into its output axis `axis` (the axes before and after keeping their sizes' products): the layout
    that a flatten of [batch, seq] into [batch*seq] has (transformers' BERT mask, gathered back row by row)."""
    shape, new = node.type(0).shape, tuple(node.attrs["shape"])
    for first in range(bound.axis):
        for axis in range(len(new)):
            if int(np.prod(new[:axis])) != int(np.prod(shape[:first])):
                continue
            for end in range(bound.axis + 1, len(shape) + 1):
                if new[axis] == int(np.prod(shape[first:end])) and int(np.prod(new[axis + 1:])) == int(
                        np.prod(shape[end:])):
                    return first, end, axis
    return None


def _compacted_reshape(node: BoundedNode, bound: Bound, first: int, end: int, axis: int) -> list[str]:
    """The merged axis as the model at its actual length would lay it out: outer index o, data-dependent
    position k < length, inner index d at o*length*inner + k*inner + d (one gather from the padded layout,
    where they sit at (o*size + k)*inner + d); valid up to outer*length*inner."""
    b = node.builder
    shape = node.type(0).shape
    outer, size, inner = int(np.prod(shape[first:bound.axis])), shape[bound.axis], int(np.prod(shape[bound.axis + 1:end]))
    merged = outer * size * inner
    flat = b.add_unbounded_node("Reshape", [node.inputs[0]], 1, node.hint, shape=(
        int(np.prod(shape[:first])), merged, int(np.prod(shape[end:]))))[0]
    position = np.arange(merged, dtype=np.int64)
    steps = b.add_constant(position // inner, "position")  # (o*length + k) for the valid positions
    within = b.add_constant(position % inner, "position")  # d
    length = arithmetic(b, "Max", bound.length, length_constant(b, 1))  # an empty axis: nothing valid, no / 0
    row = arithmetic(b, "Div", steps, length)
    k = arithmetic(b, "Sub", steps, arithmetic(b, "Mul", row, length))
    source = arithmetic(b, "Add", arithmetic(b, "Mul", arithmetic(b, "Add", arithmetic(
        b, "Mul", row, length_constant(b, size)), k), length_constant(b, inner)), within)
    count = arithmetic(b, "Mul", bound.length, length_constant(b, outer * inner))
    valid = arithmetic(b, "Less", b.add_constant(position, "position"), count)
    source = b.add_unbounded_node("Where", [valid, source, length_constant(b, 0)], 1, "source")[0]
    gathered = b.add_unbounded_node("Gather", [flat, source], 1, node.hint, axis=1)[0]
    outputs = b.add_unbounded_node("Reshape", [gathered], 1, node.hint, shape=tuple(node.attrs["shape"]))
    b.merged_lengths[count] = (bound.length, outer, inner)
    return set_bound(b, outputs, Bound(count, axis))


def _split_back(node: BoundedNode, bound: Bound) -> Optional[tuple[int, int, int, int]]:
    """(first, axis, end, size) when the reshape splits a compacted merged axis (_compacted_reshape) back into
    output axes first..end-1 whose axes before `axis` multiply to its outer size, `axis` has `size` entries
    and those after it multiply to its inner size."""
    merged = node.builder.merged_lengths.get(bound.length)
    if merged is None:
        return None
    _, outer, inner = merged
    shape, new = node.type(0).shape, tuple(node.attrs["shape"])
    dim = shape[bound.axis]
    for first in range(len(new)):
        if int(np.prod(new[:first])) != int(np.prod(shape[:bound.axis])):
            continue
        for axis in range(first, len(new)):
            for end in range(axis + 1, len(new) + 1):
                if (int(np.prod(new[first:axis])) == outer and int(np.prod(new[axis + 1:end])) == inner
                        and outer * new[axis] * inner == dim):
                    return first, axis, end, new[axis]
    return None


def _spread_reshape(node: BoundedNode, bound: Bound, first: int, axis: int, end: int, size: int) -> list[str]:
    """The inverse of _compacted_reshape: padded position (o, k, d) of the split axes reads the compacted
    o*length*inner + k*inner + d when k < length (the per-row length); bounded along `axis` by it."""
    b = node.builder
    length, outer, inner = b.merged_lengths[bound.length]
    shape = node.type(0).shape
    merged = shape[bound.axis]
    flat = b.add_unbounded_node("Reshape", [node.inputs[0]], 1, node.hint, shape=(
        int(np.prod(shape[:bound.axis])), merged, int(np.prod(shape[bound.axis + 1:]))))[0]
    position = np.arange(merged, dtype=np.int64)
    row = b.add_constant(position // (size * inner), "position")  # o
    k_value = position // inner % size
    k = b.add_constant(k_value, "position")
    within = b.add_constant(position % inner, "position")  # d
    source = arithmetic(b, "Add", arithmetic(b, "Mul", arithmetic(b, "Add", arithmetic(
        b, "Mul", row, length), k), length_constant(b, inner)), within)
    valid = arithmetic(b, "Less", k, length)
    source = b.add_unbounded_node("Where", [valid, source, length_constant(b, 0)], 1, "source")[0]
    gathered = b.add_unbounded_node("Gather", [flat, source], 1, node.hint, axis=1)[0]
    outputs = b.add_unbounded_node("Reshape", [gathered], 1, node.hint, shape=tuple(node.attrs["shape"]))
    return set_bound(b, outputs, Bound(length, axis))


def reshaped_bound(node: BoundedNode, bound: Bound, others: Sequence[int] = ()) -> Bound:
    """Where the run-time length of one axis lands after a Reshape (`others`: the input's other axes with a
    run-time length, which an axis may not be merged with)."""
    b = node.builder
    shape, new = node.type(0).shape, tuple(node.attrs["shape"])
    before, dim = int(np.prod(shape[:bound.axis])), shape[bound.axis]
    lined_up = [a for a in range(len(new)) if int(np.prod(new[:a])) == before]  # the same axes before it
    axis = next((a for a in lined_up if new[a] != 1 or dim == 1), None)
    if axis is not None and dim and new[axis] == dim:
        return Bound(bound.length, axis)
    if axis is not None and dim and new[axis] % dim == 0 and any(
            int(np.prod(shape[bound.axis:end])) == new[axis] and not any(bound.axis < o < end for o in others)
            for end in range(bound.axis + 1, len(shape) + 1)):
        return Bound(arithmetic(b, "Mul", bound.length, length_constant(b, new[axis] // dim)), axis)
    if axis is not None and new[axis] and dim % new[axis] == 0 and any(
            int(np.prod(new[axis:end])) == dim for end in range(axis + 1, len(new) + 1)):
        return Bound(arithmetic(b, "Div", bound.length, length_constant(b, dim // new[axis])), axis)
    raise node.refuse(f"the reshape to {list(new)} moves its data-dependent axis behind others")


@bound_rule("Slice")
def _slice(node: BoundedNode) -> list[str]:
    return set_bound(node.builder, node.emit(), sliced_bound(node, _only(node)))


def sliced_bound(node: BoundedNode, bound: Bound) -> Bound:
    start, step, size = (node.attrs[k][bound.axis] for k in ("starts", "steps", "sizes"))
    dim = node.type(0).shape[bound.axis]
    if (start, step, size) == (0, 1, dim):
        return bound
    if step != 1:
        raise node.refuse("a strided slice along the data-dependent axis")
    b = node.builder
    rest = arithmetic(b, "Sub", bound.length, length_constant(b, start))
    length = arithmetic(b, "Min", arithmetic(b, "Max", rest, length_constant(b, 0)), length_constant(b, size))
    return Bound(length, bound.axis)


@bound_rule("Pad")
def _pad(node: BoundedNode) -> list[str]:
    bound = _only(node)
    pads = node.attrs["pads"]
    if pads[bound.axis] or pads[bound.axis + node.type(0).rank]:
        raise node.refuse("padding along the data-dependent axis")
    return set_bound(node.builder, node.emit(), bound)


@bound_rule("Gather")
def _gather(node: BoundedNode) -> list[str]:
    axis, data, indices = node.attrs["axis"], node.bound(0), node.bound(1)
    if indices is not None:  # padding indices read entry 0: computed ones may lie outside the data
        if data is not None and data.axis != axis:
            raise node.refuse("both the data and the indices are data-dependent")
        outputs = node.emit([node.inputs[0], node.mask(1, 0)])
        return set_bound(node.builder, outputs, Bound(indices.length, axis + indices.axis))
    if data.axis == axis:  # the indices say which valid entries to read: the result has a static size
        return node.emit()
    mapped = data.axis if data.axis < axis else data.axis + node.type(1).rank - 1
    return set_bound(node.builder, node.emit(), Bound(data.length, mapped))


@bound_rule("GatherElements")
def _gather_elements(node: BoundedNode) -> list[str]:
    axis, data, indices = node.attrs["axis"], node.bound(0), node.bound(1)
    if indices is not None:
        if data is not None and data.axis not in (axis, indices.axis):
            raise node.refuse("the data and the indices are data-dependent along different axes")
        return set_bound(node.builder, node.emit(), indices)
    return node.emit() if data.axis == axis else set_bound(node.builder, node.emit(), data)


@bound_rule("GatherND")
def _gather_nd(node: BoundedNode) -> list[str]:
    batch, data, indices = node.attrs["batch_dims"], node.bound(0), node.bound(1)
    rank, depth = node.type(1).rank, node.type(1).shape[-1]
    if indices is not None:
        if indices.axis == rank - 1:
            raise node.refuse("the index tuples themselves have a data-dependent length")
        if data is not None and data.axis >= batch + depth:
            raise node.refuse("both the data and the indices are data-dependent")
        return set_bound(node.builder, node.emit(), indices)
    if batch <= data.axis < batch + depth:  # indexed axes: the indices point into the valid part
        return node.emit()
    mapped = data.axis if data.axis < batch else rank - 1 + data.axis - batch - depth
    return set_bound(node.builder, node.emit(), Bound(data.length, mapped))


@bound_rule("Concat")
def _concat(node: BoundedNode) -> list[str]:
    axis = node.attrs["axis"]
    axes = {b.axis for _, b in node.bounded()}
    if len(axes) > 1:
        raise node.refuse("its inputs are data-dependent along different axes")
    if axes != {axis}:  # the parts share the run-time length (ONNX requires equal dims off the axis)
        return set_bound(node.builder, node.emit(), node.bounded()[0][1])
    inner = [i for i, _ in node.bounded() if 0 < i < len(node.inputs) - 1]
    if node.bound(0) is not None and len(node.inputs) > 1 and not inner:  # a KV cache: the past, then the new entries
        return _offset_concat(node, axis)
    return _compacted_concat(node, axis)


def _offset_concat(node: BoundedNode, axis: int) -> list[str]:
    """Concat along the data-dependent axis of a bounded first part (length p) and parts of which only the last may
    be bounded: an offset copy. Position i < p is the first part's own i (the static concat's row: an affine read),
    and i >= p the rest's i - p (clamped; past p + the rest's length it is padding), so a kernel picks its part with
    one comparison per row instead of reading a table of computed positions, whose first kernel recomputes it."""
    b = node.builder
    rest = node.inputs[1:]
    tail = rest[0] if len(rest) == 1 else b.add_unbounded_node("Concat", rest, 1, "tail", axis=axis)[0]
    tail_dim = b.type_of(tail).shape[axis]
    (joined,) = node.emit()
    shape = b.type_of(joined).shape
    length = node.bound(0).length
    position = b.add_constant(np.arange(shape[axis], dtype=np.int64), "position")
    shifted = arithmetic(b, "Max", arithmetic(b, "Sub", position, length), length_constant(b, 0))
    moved = b.add_unbounded_node("Gather", [tail, arithmetic(b, "Min", shifted, length_constant(b, tail_dim - 1))], 1,
                                 "tail", axis=axis)[0]
    rows = [1] * len(shape)
    rows[axis] = shape[axis]
    row_position = b.add_constant(np.arange(shape[axis], dtype=np.int64).reshape(rows), "position")
    head_length = b.add_unbounded_node("Reshape", [length], 1, "length", shape=(1,) * len(shape))[0]
    in_head = b.add_unbounded_node("Less", [row_position, head_length], 1, "in_head")[0]
    (joined,) = b.add_unbounded_node("Where", [in_head, joined, moved], 1, node.hint)
    last, before_last = node.bound(len(rest)), tail_dim - node.type(len(rest)).shape[axis]
    rest_length = length_constant(b, tail_dim) if last is None else \
        arithmetic(b, "Add", last.length, length_constant(b, before_last)) if before_last else last.length
    bound = Bound(arithmetic(b, "Add", length, rest_length), axis)
    # 0 past the end, so that the product of attention weights with these values needs no mask pass of its own
    return [masked(b, set_bound(b, [joined], bound)[0], 0, bound)]


def _compacted_concat(node: BoundedNode, axis: int) -> list[str]:
    """Concat along the data-dependent axis: the parts at their upper bounds, then one gather that
    moves each part's valid entries right after the previous part's (index = position - offset)."""
    b = node.builder
    (joined,) = node.emit()
    total = b.type_of(joined).shape[axis]
    position = b.add_constant(np.arange(total, dtype=np.int64), "position")
    offset, static_offset = length_constant(b, 0), 0
    source = None
    for index in range(len(node.inputs)):
        dim = node.type(index).shape[axis]
        bound = node.bound(index)
        length = bound.length if bound is not None else length_constant(b, dim)
        end = arithmetic(b, "Add", offset, length)
        inside = arithmetic(b, "And", arithmetic(b, "GreaterOrEqual", position, offset),
                            arithmetic(b, "Less", position, end))
        shifted = arithmetic(b, "Add", position, length_constant(b, static_offset))
        moved = arithmetic(b, "Sub", shifted, offset)
        zero = length_constant(b, 0)
        part = b.add_unbounded_node("Where", [inside, moved, zero], 1, "source")[0]
        source = part if source is None else arithmetic(b, "Add", source, part)
        offset, static_offset = end, static_offset + dim
    outputs = b.add_unbounded_node("Gather", [joined, source], 1, node.hint, axis=axis)
    return set_bound(b, outputs, Bound(offset, axis))


@bound_rule("MatMul")
def _matmul(node: BoundedNode) -> list[str]:
    ra, rb = node.type(0).rank, node.type(1).rank
    if ra < 2 or rb < 2:
        a_k, b_k = node.bound(0) is None or node.bound(0).axis == ra - 1, \
            node.bound(1) is None or node.bound(1).axis == max(0, rb - 2)
        if not (a_k and b_k):
            raise node.refuse("a matrix-vector product with a data-dependent non-reduced axis")
    rank = max(ra, rb)
    inputs, out = list(node.inputs), None
    # (input, its rank, its reduced axis, its kept matrix axis, where that one lands in the output)
    for index, own, reduced, kept, lands in ((0, ra, ra - 1, ra - 2, rank - 2),
                                              (1, rb, max(0, rb - 2), rb - 1, rank - 1)):
        bound = node.bound(index)
        if bound is None:
            continue
        if bound.axis == reduced:
            inputs[index] = node.mask(index, 0)
            continue
        mapped = Bound(bound.length, lands if bound.axis == kept else bound.axis + rank - own)
        if out is not None and out.axis != mapped.axis:
            raise node.refuse("both operands are data-dependent along different output axes")
        out = out or mapped
    return set_bound(node.builder, node.emit(inputs), out)


def _kept_axis(axis: int, reduced: Sequence[int], keepdims) -> int:
    return axis if keepdims else axis - sum(1 for a in reduced if a < axis)


_REDUCE_FILL = {"ReduceSum": lambda dtype: 0, "ReduceMean": lambda dtype: 0, "ReduceProd": lambda dtype: 1,
                "ReduceMax": lambda dtype: fill_value(dtype, True), "ReduceMin": lambda dtype: fill_value(dtype, False)}


@bound_rule(*_REDUCE_FILL)
def _reduce(node: BoundedNode) -> list[str]:
    bound, axes = _only(node), tuple(node.attrs["axes"])
    if bound.axis not in axes:
        kept = _kept_axis(bound.axis, axes, node.attrs["keepdims"])
        return set_bound(node.builder, node.emit(), Bound(bound.length, kept))
    x = node.type(0)
    inputs = [node.mask(0, _REDUCE_FILL[node.op](x.dtype))]
    if node.op != "ReduceMean":
        return node.emit(inputs)
    if np.dtype(x.dtype).kind != "f":
        raise node.refuse("an integer mean over the data-dependent axis")
    b = node.builder
    (total,) = b.add_unbounded_node("ReduceSum", inputs, 1, node.hint, **node.attrs)
    others = int(np.prod([x.shape[a] for a in axes if a != bound.axis]))
    count = arithmetic(b, "Mul", bound.length, length_constant(b, others))
    count = b.add_unbounded_node("Cast", [count], 1, "count", to=x.dtype)[0]
    return [arithmetic(b, "Div", total, count)]


@bound_rule("Softmax", "LogSoftmax")
def _softmax(node: BoundedNode) -> list[str]:
    bound = _only(node)
    inputs = [node.mask(0, -np.inf)] if bound.axis == node.attrs["axis"] else None
    outputs = set_bound(node.builder, node.emit(inputs), bound)
    if inputs and node.op == "Softmax":
        softmax_fills(node.builder, inputs[0], outputs, bound.axis)
    return outputs


@bound_rule("LayerNormalization")
def _layer_norm(node: BoundedNode) -> list[str]:
    bound = node.bound(0)
    if bound is None or len(node.bounded()) > 1 or bound.axis >= node.attrs["axis"]:
        raise node.refuse("it normalizes over the data-dependent axis")
    return set_bound(node.builder, node.emit(), bound)


@bound_rule("ArgMax", "ArgMin")
def _arg_extreme(node: BoundedNode) -> list[str]:
    bound, axis = _only(node), node.attrs["axis"]
    if bound.axis == axis:
        return node.emit([node.mask(0, fill_value(node.type(0).dtype, node.op == "ArgMax"))])
    kept = _kept_axis(bound.axis, (axis,), node.attrs["keepdims"])
    return set_bound(node.builder, node.emit(), Bound(bound.length, kept))


@bound_rule("CumSum", "CumProd")
def _cumulative(node: BoundedNode) -> list[str]:
    bound = _only(node)
    inputs = None
    if bound.axis == node.attrs["axis"] and node.attrs["reverse"]:  # the scan starts in the padding
        inputs = [node.mask(0, 0 if node.op == "CumSum" else 1)]
    return set_bound(node.builder, node.emit(inputs), bound)


@bound_rule("TopK")
def _top_k(node: BoundedNode) -> list[str]:
    bound, axis = _only(node), node.attrs["axis"]
    if bound.axis != axis:
        return set_bound(node.builder, node.emit(), bound)
    outputs = node.emit([node.mask(0, fill_value(node.type(0).dtype, bool(node.attrs["largest"])))])
    length = arithmetic(node.builder, "Min", bound.length, length_constant(node.builder, node.attrs["k"]))
    return set_bound(node.builder, outputs, Bound(length, axis))


@bound_rule("NonZero")
def _non_zero(node: BoundedNode) -> list[str]:
    return node.emit([node.mask(0, 0)])  # zeros are not listed; the op's own bound follows


@bound_rule("Compress")
def _compress(node: BoundedNode) -> list[str]:
    data, condition, axis = node.bound(0), node.bound(1), node.attrs["axis"]
    if data is not None and data.axis != axis:
        raise node.refuse("selecting along another axis than the data-dependent one")
    flags = node.mask(1, False) if condition is not None else node.inputs[1]
    if data is not None:  # entries past the data's length are never selected
        flags = masked(node.builder, flags, False, Bound(data.length, 0))
    return node.emit([node.inputs[0], flags])


@bound_rule("NonMaxSuppression")
def _nms(node: BoundedNode) -> list[str]:
    """Boxes past the valid count are never selected: their scores sort last (-inf) and the kernel skips
    candidates at or past the count (its optional third input)."""
    boxes, scores = node.bound(0), node.bound(1)
    if (boxes is not None and boxes.axis != 1) or (scores is not None and scores.axis != 2):
        raise node.refuse("boxes or scores are data-dependent along their batch or class axis")
    length = (scores or boxes).length
    score_input = node.mask(1, -np.inf) if scores is not None else node.inputs[1]
    return node.emit([node.inputs[0], score_input, length])


@bound_rule("ScatterElements", "ScatterND")
def _scatter(node: BoundedNode) -> list[str]:
    """Padding entries of the indices and updates are sent to one extra slot appended to the data along
    the scattered axis (axis 0 for ScatterND), which is cut off again: they write nothing that counts."""
    data, indices, updates = node.bound(0), node.bound(1), node.bound(2)
    entries = indices or updates
    if entries is None:
        return set_bound(node.builder, node.emit(), data)
    if node.op == "ScatterND" and entries.axis >= node.type(1).rank - 1:
        raise node.refuse("the index tuples or the updated slices have a data-dependent length")
    if indices is not None and updates is not None and indices.axis != updates.axis:
        raise node.refuse("the indices and the updates are data-dependent along different axes")
    return scatter_past_lengths(node, [entries], data)


def scatter_past_lengths(node: BoundedNode, entries: Sequence[Bound], data) -> list[str]:
    """The scatter with the entries past each of `entries` (bounds of the indices) written into a spare slot,
    then cut off; the result keeps the data's bound."""
    b, rank = node.builder, node.type(0).rank
    axis = node.attrs.get("axis", 0)
    last = node.type(1).rank - 1
    dim = node.type(0).shape[axis]
    pads = [0] * (2 * rank)
    pads[rank + axis] = 1
    (spare,) = b.add_unbounded_node("Pad", [node.inputs[0]], 1, "spare_slot", pads=tuple(pads), mode="constant",
                                    value=0.0)
    if node.op == "ScatterND":  # index tuples (dim, 0, 0, ...): the spare slot of axis 0
        fill = np.zeros((1,) * last + (node.type(1).shape[-1],), np.int64)
        fill.reshape(-1)[0] = dim
    else:
        fill = dim
    targets = node.inputs[1]
    for part in entries:
        targets = masked(b, targets, fill, part)
    (scattered,) = node.emit([spare, targets, node.inputs[2]])
    shape = node.type(0).shape
    (out,) = b.add_unbounded_node("Slice", [scattered], 1, node.hint, starts=(0,) * rank, steps=(1,) * rank,
                                  sizes=shape)
    return set_bound(b, [out], data)


@bound_rule("RoiAlign")
def _roi_align(node: BoundedNode) -> list[str]:
    return roi_align_rule(node, [node.bound(0)] if node.bound(0) is not None else [])


def roi_align_rule(node: BoundedNode, map_parts: Sequence[Bound]) -> list[str]:
    """The regions (rois, batch indices) may come in a data-dependent number; the feature map may have run-time
    height and width, which the kernel takes as its valid extent (its 4th input: edges clamp there)."""
    rois, batch = node.bound(1), node.bound(2)
    if any(p.axis < 2 for p in map_parts) or (rois and rois.axis != 0) or (batch and batch.axis != 0):
        raise node.refuse("only the regions (rois, batch indices) and the map's height and width may have "
                          "run-time lengths")
    b = node.builder
    inputs = [node.inputs[0]] + [node.mask(i, 0) if node.bound(i) is not None else node.inputs[i] for i in (1, 2)]
    if map_parts:
        sides = {p.axis: p.length for p in map_parts}
        shape = node.type(0).shape
        extent = [sides.get(a) or length_constant(b, shape[a]) for a in (2, 3)]
        inputs.append(b.add_unbounded_node("Concat", extent, 1, "extent", axis=0)[0])
    outputs = node.emit(inputs)
    bound = rois or batch
    return set_bound(b, outputs, Bound(bound.length, 0)) if bound is not None else outputs

