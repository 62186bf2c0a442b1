"""Ops with data-dependent output shapes (NonZero, Compress, Unique): each IR op also yields the
`[axis, length]` bound that the importer turns into the output `name::bound` for the runtime."""
from __future__ import annotations

from .registry import ConvertContext, converter


def _bounded(ctx: ConvertContext, op: str, inputs: list[str], **attrs) -> str:
    result, bound = ctx.emit(op, inputs, 2, **attrs)
    ctx.builder.bound_value(result, bound)
    return result


@converter("NonZero", since_version=9)
def non_zero(ctx: ConvertContext) -> str:
    return _bounded(ctx, "NonZero", [ctx.input(0)])


@converter("Compress", since_version=9)
def compress(ctx: ConvertContext) -> str:
    x = ctx.input(0)
    if ctx.attr("axis") is None:  # no axis: select from the flattened input
        x = ctx.reshape(x, [ctx.type_of(0).numel])
        axis = 0
    else:
        axis = ctx.axis(ctx.attr("axis"), ctx.type_of(0).rank)
    return _bounded(ctx, "Compress", [x, ctx.input(1)], axis=axis)


@converter("Unique", since_version=11)
def unique(ctx: ConvertContext) -> list[str]:
    x = ctx.input(0)
    if ctx.attr("axis") is None:  # no axis: the distinct elements of the flattened input
        x, axis = ctx.reshape(x, [ctx.type_of(0).numel]), 0
    else:
        axis = ctx.axis(ctx.attr("axis"), ctx.type_of(0).rank)
    y, first, inverse, counts, y_bound, rows_bound = ctx.emit("Unique", [x], 6, axis=axis,
                                                              sorted=int(ctx.attr("sorted", 1)))
    ctx.builder.bound_value(y, y_bound)
    ctx.builder.bound_value(first, rows_bound)
    ctx.builder.bound_value(counts, rows_bound)
    return [y, first, inverse, counts][:max(1, len(ctx.node.output))]
