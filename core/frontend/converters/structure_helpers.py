"""Static-shape building blocks shared by the control-flow and sequence converters: take one slice of
an axis, stack slices along a new axis, and select between two same-typed values (tensors, sequences,
optionals) with a run-time boolean."""
from __future__ import annotations

from typing import Sequence

from core.graph.bounded import select_bounded

from ..structured_values import OptionalValue, SequenceValue, Value, kind_of
from .registry import ConvertContext


def take(ctx: ConvertContext, value: str, axis: int, index: int) -> str:
    """value[..., index, ...] along `axis`, that axis removed (a Slice and a Reshape)."""
    shape = ctx.builder.type_of(value).shape
    if not 0 <= index < shape[axis]:
        ctx.fail(f"index {index} is out of range for axis {axis} of shape {list(shape)}")
    starts = [index if a == axis else 0 for a in range(len(shape))]
    sizes = [1 if a == axis else d for a, d in enumerate(shape)]
    piece = ctx.emit1("Slice", [value], starts=starts, steps=[1] * len(shape), sizes=sizes)
    return ctx.reshape(piece, shape[:axis] + shape[axis + 1:])


def piece(ctx: ConvertContext, value: str, axis: int, start: int, size: int) -> str:
    """value[..., start:start+size, ...] along `axis`."""
    shape = ctx.builder.type_of(value).shape
    starts = [start if a == axis else 0 for a in range(len(shape))]
    sizes = [size if a == axis else d for a, d in enumerate(shape)]
    return ctx.emit1("Slice", [value], starts=starts, steps=[1] * len(shape), sizes=sizes)


def stack(ctx: ConvertContext, values: Sequence[str], axis: int) -> str:
    """The values (all of one shape) stacked along a new axis `axis` (0 <= axis <= rank)."""
    shape = ctx.builder.type_of(values[0]).shape
    if not 0 <= axis <= len(shape):
        ctx.fail(f"axis {axis} is out of range for stacking rank-{len(shape)} values")
    expanded = [ctx.reshape(v, shape[:axis] + (1,) + shape[axis:]) for v in values]
    return expanded[0] if len(expanded) == 1 else ctx.emit1("Concat", expanded, axis=axis)


def as_flag(ctx: ConvertContext, value: str, what: str) -> str:
    """A one-element bool tensor as a 0-d one (so that selecting with it never broadcasts shapes)."""
    ttype = ctx.builder.type_of(value)
    if ttype.dtype != "bool" or ttype.numel != 1:
        ctx.fail(f"{what} must be a one-element bool tensor, got {ttype}")
    return ctx.reshape(value, ())


def select(ctx: ConvertContext, flag: str, if_true: Value, if_false: Value, what: str) -> Value:
    """Where(flag, if_true, if_false), elementwise over sequences and optionals of the same structure.

    Both sides must have the same static type: the selection happens at run time, after both were
    computed, so the result's shape cannot depend on the flag."""
    if isinstance(if_true, str) and isinstance(if_false, str):
        if if_true == if_false:
            return if_true
        true_type, false_type = ctx.builder.type_of(if_true), ctx.builder.type_of(if_false)
        if true_type != false_type or if_true in ctx.builder.bounds or if_false in ctx.builder.bounds:
            selected = select_bounded(ctx.builder, flag, if_true, if_false)  # data-dependent lengths
            if selected is not None:
                return selected
        if true_type != false_type:
            ctx.unsupported(f"{what}: {true_type} versus {false_type}; a condition computed at run time "
                            f"needs both to have the same type")
        return ctx.emit1("Where", [flag, if_true, if_false])
    if isinstance(if_true, SequenceValue) and isinstance(if_false, SequenceValue):
        if len(if_true) != len(if_false):
            ctx.unsupported(f"{what}: sequences of {len(if_true)} and {len(if_false)} tensors; a condition "
                            f"computed at run time needs both to have the same length")
        return SequenceValue(tuple(select(ctx, flag, t, f, f"{what} element {i}") for i, (t, f)
                                   in enumerate(zip(if_true.elements, if_false.elements))), if_true.elem_dtype)
    if isinstance(if_true, OptionalValue) and isinstance(if_false, OptionalValue):
        if (if_true.element is None) != (if_false.element is None):
            ctx.unsupported(f"{what}: an empty and a full optional; a condition computed at run time needs "
                            f"both to agree on whether it holds a value")
        if if_true.element is None:
            return if_true
        return OptionalValue(select(ctx, flag, if_true.element, if_false.element, what))
    ctx.unsupported(f"{what}: {kind_of(if_true)} versus {kind_of(if_false)}")
