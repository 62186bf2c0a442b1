"""Sequence and optional ops over compile-time structures (structured_values): a sequence is a tuple of
tensor values whose length is known at import, an optional knows whether it holds a value. Positions
and split sizes must therefore be compile-time constants (core.backend specializes on graph inputs
that set them); the tensors themselves stay run-time values, and only Slice/Concat/Reshape/Where
reach the graph IR."""
from __future__ import annotations

import numpy as np

from ..onnx_values import numpy_dtype
from ..structured_values import OptionalValue, SequenceValue, Value, kind_of
from .registry import ConvertContext, accepts_structured, converter
from .structure_helpers import piece, stack, take


def _sequence(ctx: ConvertContext, index: int) -> SequenceValue:
    value = ctx.value(index)
    if isinstance(value, OptionalValue) and isinstance(value.element, SequenceValue):
        value = value.element
    if not isinstance(value, SequenceValue):
        ctx.fail(f"input {index} must be a sequence, got {kind_of(value)}")
    return value


def _tensor(ctx: ConvertContext, index: int) -> str:
    value = ctx.value(index)
    if not isinstance(value, str):
        ctx.fail(f"input {index} must be a tensor, got {kind_of(value)}")
    return value


def _position(ctx: ConvertContext, index: int, length: int, default: int, allow_end: bool = False) -> int:
    """A constant position in [-length, length) (or up to length inclusive for insertion)."""
    if not ctx.has_input(index):
        return default
    array = ctx.builder.constant_value(_tensor(ctx, index))
    if array is None:
        ctx.unsupported("the position is computed at run time; sequence lengths and positions must be "
                        "known at compile time")
    position = int(array.reshape(-1)[0])
    upper = length + 1 if allow_end else length
    if not -length <= position < upper:
        ctx.fail(f"position {position} is out of range for a sequence of {length} tensors")
    return position + length if position < 0 else position


def _with_dtype(ctx: ConvertContext, elements: tuple[str, ...], dtype: str | None) -> SequenceValue:
    dtypes = {ctx.builder.type_of(e).dtype for e in elements} | ({dtype} if dtype else set())
    if len(dtypes) > 1:
        ctx.fail(f"a sequence holds tensors of one dtype, got {sorted(dtypes)}")
    return SequenceValue(tuple(elements), dtypes.pop() if dtypes else None)


@converter("SequenceConstruct", since_version=11)
@accepts_structured
def sequence_construct(ctx: ConvertContext) -> SequenceValue:
    return _with_dtype(ctx, tuple(_tensor(ctx, i) for i in range(len(ctx.node.input))), None)


@converter("SequenceEmpty", since_version=11)
def sequence_empty(ctx: ConvertContext) -> SequenceValue:
    return SequenceValue((), numpy_dtype(int(ctx.attr("dtype", 1)), ctx.where))


@converter("SequenceLength", since_version=11)
@accepts_structured
def sequence_length(ctx: ConvertContext) -> str:
    return ctx.const(np.array(len(_sequence(ctx, 0)), dtype=np.int64))


@converter("SequenceAt", since_version=11)
@accepts_structured
def sequence_at(ctx: ConvertContext) -> str:
    sequence = _sequence(ctx, 0)
    if not ctx.has_input(1):
        ctx.fail("needs a position")
    if ctx.builder.constant_value(_tensor(ctx, 1)) is None and len(sequence):
        return _select_at(ctx, sequence, _tensor(ctx, 1))
    return sequence.elements[_position(ctx, 1, len(sequence), 0)]


def _select_at(ctx: ConvertContext, sequence: SequenceValue, position: str) -> str:
    """sequence[position] for a position computed at run time: a chain of Where over elements of one type
    (a position out of range, which ONNX Runtime rejects, reads element 0)."""
    types = {ctx.builder.type_of(e) for e in sequence.elements}
    if len(types) > 1:
        ctx.unsupported("the position is computed at run time and the elements differ in shape; sequence "
                        "positions must then be known at compile time")
    ptype = ctx.builder.type_of(position)
    if ptype.numel != 1:
        ctx.fail(f"the position must have one element, got {ptype}")
    index = ctx.reshape(position, ())
    wrapped = ctx.emit1("Where", [ctx.emit1("Less", [index, ctx.scalar_like(0, index)]),
                                  ctx.emit1("Add", [index, ctx.scalar_like(len(sequence), index)]), index])
    result = sequence.elements[0]
    for i, element in enumerate(sequence.elements[1:], start=1):
        result = ctx.emit1("Where", [ctx.emit1("Equal", [wrapped, ctx.scalar_like(i, index)]), element, result])
    return result


@converter("SequenceInsert", since_version=11)
@accepts_structured
def sequence_insert(ctx: ConvertContext) -> SequenceValue:
    sequence = _sequence(ctx, 0)
    at = _position(ctx, 2, len(sequence), len(sequence), allow_end=True)
    elements = sequence.elements[:at] + (_tensor(ctx, 1),) + sequence.elements[at:]
    return _with_dtype(ctx, elements, sequence.elem_dtype)


@converter("SequenceErase", since_version=11)
@accepts_structured
def sequence_erase(ctx: ConvertContext) -> SequenceValue:
    sequence = _sequence(ctx, 0)
    if not len(sequence):
        ctx.fail("cannot erase from an empty sequence")
    at = _position(ctx, 1, len(sequence), len(sequence) - 1)
    return SequenceValue(sequence.elements[:at] + sequence.elements[at + 1:], sequence.elem_dtype)


@converter("SplitToSequence", since_version=11)
def split_to_sequence(ctx: ConvertContext) -> SequenceValue:
    data = ctx.input(0)
    shape = ctx.shape(0)
    axis = ctx.axis(ctx.attr("axis", 0), len(shape))
    dim = shape[axis]
    split = ctx.optional_constant(1, "split")
    if split is None:  # one slice per index; keepdims=0 drops the split axis
        if ctx.attr("keepdims", 1):
            return SequenceValue(tuple(piece(ctx, data, axis, i, 1) for i in range(dim)), ctx.type_of(0).dtype)
        return SequenceValue(tuple(take(ctx, data, axis, i) for i in range(dim)), ctx.type_of(0).dtype)
    if split.ndim == 0:  # equal chunks of that size, the last one smaller
        size = int(split)
        if size <= 0:
            ctx.fail(f"split size {size} must be positive")
        sizes = [min(size, dim - start) for start in range(0, dim, size)]
    else:
        sizes = [int(s) for s in split.reshape(-1)]
        if any(s < 0 for s in sizes) or sum(sizes) != dim:
            ctx.fail(f"split sizes {sizes} must be non-negative and add up to the axis size {dim}")
    starts = np.cumsum([0] + sizes[:-1])
    return SequenceValue(tuple(piece(ctx, data, axis, int(s), n) for s, n in zip(starts, sizes)), ctx.type_of(0).dtype)


@converter("ConcatFromSequence", since_version=11)
@accepts_structured
def concat_from_sequence(ctx: ConvertContext) -> str:
    elements = list(_sequence(ctx, 0).elements)
    if not elements:
        ctx.fail("cannot concatenate an empty sequence")
    rank = ctx.builder.type_of(elements[0]).rank
    if ctx.attr("new_axis", 0):
        return stack(ctx, elements, ctx.axis(ctx.attr("axis"), rank + 1))
    axis = ctx.axis(ctx.attr("axis"), rank)
    return elements[0] if len(elements) == 1 else ctx.emit1("Concat", elements, axis=axis)


@converter("Optional", since_version=15)
@accepts_structured
def optional(ctx: ConvertContext) -> OptionalValue:
    if not ctx.has_input(0):
        return OptionalValue(None)
    return OptionalValue(ctx.value(0))


@converter("OptionalHasElement", since_version=15)
@accepts_structured
def optional_has_element(ctx: ConvertContext) -> str:
    value = ctx.value(0) if ctx.has_input(0) else OptionalValue(None)
    present = not isinstance(value, OptionalValue) or value.element is not None
    return ctx.const(np.array(present))


@converter("OptionalGetElement", since_version=15)
@accepts_structured
def optional_get_element(ctx: ConvertContext) -> Value:
    value = ctx.value(0)
    if isinstance(value, OptionalValue):
        if value.element is None:
            ctx.fail("the optional is empty")
        return value.element
    return value


@converter("SequenceMap", since_version=17)
@accepts_structured
def sequence_map(ctx: ConvertContext) -> list[SequenceValue]:
    body = ctx.attr("body")
    first = _sequence(ctx, 0)
    inputs = [ctx.value(i) for i in range(len(ctx.node.input))]
    for i, value in enumerate(inputs):
        if isinstance(value, SequenceValue) and len(value) != len(first):
            ctx.fail(f"input {i} has {len(value)} tensors, input 0 has {len(first)}")
    results: list[list[str]] = [[] for _ in body.output]
    for n in range(len(first)):
        bound = {formal.name: value.elements[n] if isinstance(value, SequenceValue) else value
                 for formal, value in zip(body.input, inputs)}
        for column, produced in zip(results, ctx.scope.import_graph(body, bound)):
            if not isinstance(produced, str):
                ctx.fail("the body must give tensors")
            column.append(produced)
    dtypes = [numpy_dtype(o.type.tensor_type.elem_type, ctx.where) if o.type.tensor_type.elem_type else None
              for o in body.output]
    return [_with_dtype(ctx, tuple(column), dtype) for column, dtype in zip(results, dtypes)]
