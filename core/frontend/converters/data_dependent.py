"""Ops with data-dependent output shapes (NonZero, Compress, Unique, NonMaxSuppression): each IR op
also yields the `[axis, length]` bound that later ops take as a run-time length (core/graph/bounded.py)
and that the importer turns into the output `name::bound`. Folded at compile time, the result is
simply cut to its length."""
from __future__ import annotations

from .registry import ConvertContext, converter


def _bounded(ctx: ConvertContext, op: str, inputs: list[str], bounded_axis: int, **attrs) -> str:
    result, bound = ctx.emit(op, inputs, 2, **attrs)
    return _mark(ctx, result, bound, bounded_axis)


def _mark(ctx: ConvertContext, result: str, bound: str, axis: int) -> str:
    builder = ctx.builder
    folded, length = builder.constant_value(result), builder.constant_value(bound)
    if folded is None or length is None:
        builder.bound_value(result, bound, axis)
        return result
    return ctx.const(folded.take(range(int(length[1])), axis=axis))


@converter("NonZero", since_version=9)
def non_zero(ctx: ConvertContext) -> str:
    return _bounded(ctx, "NonZero", [ctx.input(0)], 1)


@converter("Compress", since_version=9)
def compress(ctx: ConvertContext) -> str:
    x = ctx.input(0)
    if ctx.attr("axis") is None:  # no axis: select from the flattened input
        x = ctx.reshape(x, [ctx.type_of(0).numel])
        axis = 0
    else:
        axis = ctx.axis(ctx.attr("axis"), ctx.type_of(0).rank)
    return _bounded(ctx, "Compress", [x, ctx.input(1)], axis, axis=axis)


@converter("Unique", since_version=11)
def unique(ctx: ConvertContext) -> list[str]:
    x = ctx.input(0)
    if ctx.attr("axis") is None:  # no axis: the distinct elements of the flattened input
        x, axis = ctx.reshape(x, [ctx.type_of(0).numel]), 0
    else:
        axis = ctx.axis(ctx.attr("axis"), ctx.type_of(0).rank)
    y, first, inverse, counts, y_bound, rows_bound = ctx.emit("Unique", [x], 6, axis=axis,
                                                              sorted=int(ctx.attr("sorted", 1)))
    y = _mark(ctx, y, y_bound, axis)
    first, counts = (_mark(ctx, v, rows_bound, 0) for v in (first, counts))
    return [y, first, inverse, counts][:max(1, len(ctx.node.output))]


@converter("NonMaxSuppression", since_version=10)
def non_max_suppression(ctx: ConvertContext) -> str:
    def scalar(index: int, what: str):
        value = ctx.optional_constant(index, what)
        return None if value is None or value.size == 0 else value.reshape(-1)[0]

    max_output = scalar(2, "max_output_boxes_per_class")
    iou = scalar(3, "iou_threshold")
    score = scalar(4, "score_threshold")
    return _bounded(ctx, "NonMaxSuppression", [ctx.input(0), ctx.input(1)], 0,
                    center_point_box=int(ctx.attr("center_point_box", 0)),
                    max_output=max(0, int(max_output)) if max_output is not None else 0,
                    iou_threshold=float(iou) if iou is not None else 0.0,
                    score_threshold=None if score is None else float(score))
