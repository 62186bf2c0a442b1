"""Scatter (opset 9, ScatterElements' old name), ScatterElements and ScatterND, with reductions."""
from __future__ import annotations

from .registry import ConvertContext, converter


def _reduction(ctx: ConvertContext) -> str:
    reduction = ctx.attr("reduction", "none")
    if reduction not in ("none", "add", "mul", "max", "min"):
        ctx.unsupported(f"{ctx.op_type} reduction {reduction!r}")
    return reduction


@converter("Scatter", since_version=9)
@converter("ScatterElements", since_version=11)
def scatter_elements(ctx: ConvertContext) -> str:
    axis = ctx.axis(ctx.attr("axis", 0), ctx.type_of(0).rank)
    return ctx.emit1("ScatterElements", [ctx.input(0), ctx.input(1), ctx.input(2)], axis=axis,
                     reduction=_reduction(ctx))


@converter("ScatterND", since_version=11)
def scatter_nd(ctx: ConvertContext) -> str:
    return ctx.emit1("ScatterND", [ctx.input(0), ctx.input(1), ctx.input(2)], reduction=_reduction(ctx))
