"""Scatter (opset 9, ScatterElements' old name), ScatterElements and ScatterND with reductions; TensorScatter."""
from __future__ import annotations

import numpy as np

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


@converter("TensorScatter", since_version=24)
def tensor_scatter(ctx: ConvertContext) -> str:
    cache = ctx.type_of(0)
    axis = ctx.axis(ctx.attr("axis", -2), cache.rank)
    if axis == 0:
        ctx.fail("axis 0 is the batch axis; the sequence axis must come after it")
    write = ctx.input(2) if ctx.has_input(2) else ctx.const(np.zeros(cache.shape[0], np.int64))
    return ctx.emit1("TensorScatter", [ctx.input(0), ctx.input(1), write], axis=axis,
                     mode=str(ctx.attr("mode", "linear")))
