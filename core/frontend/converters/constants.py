"""Ops whose values are known at import (shapes are static): Constant, ConstantOfShape, Shape,
Size and Range all become constants (ConstantOfShape via a foldable Expand of its scalar); the
shape or size of a value with a data-dependent length is computed at run time instead."""
from __future__ import annotations

import numpy as np

from core.graph.bounded import bound_by_shape, runtime_shape, runtime_size, shape_operand

from .registry import ConvertContext, converter

# An import-time constant larger than this is surely a mistake in the model (or a hostile one).
MAX_CONSTANT_ELEMENTS = 1 << 31


def _check_size(ctx: ConvertContext, count: int) -> None:
    if count > MAX_CONSTANT_ELEMENTS:
        ctx.fail(f"would create a constant of {count} elements")


@converter("Constant", since_version=1)
def constant(ctx: ConvertContext) -> str:
    scalars = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64, "value_ints": np.int64}
    if ctx.attr("value") is not None:
        return ctx.const(ctx.attr_tensor("value"))
    for key, dtype in scalars.items():
        if ctx.attr(key) is not None:
            return ctx.const(np.asarray(ctx.attr(key), dtype=dtype))
    ctx.unsupported(f"Constant with attribute {', '.join(ctx.attrs) or '(none)'}")


@converter("ConstantOfShape", since_version=9)
def constant_of_shape(ctx: ConvertContext) -> str:
    dynamic = shape_operand(ctx.builder, ctx.input(0))  # the shape of a data-dependent value: at its largest
    shape = dynamic[0] if dynamic is not None else tuple(int(d) for d in ctx.constant(0, "shape").reshape(-1))
    if any(d < 0 for d in shape):
        ctx.fail(f"shape {list(shape)} has negative dimensions")
    _check_size(ctx, int(np.prod(shape, dtype=np.float64)))
    fill = ctx.attr_tensor("value")
    fill = np.zeros((), np.float32) if fill is None else fill.reshape(())
    # Expand of a scalar constant folds right away when small and stays a node when huge.
    if not shape:
        return ctx.const(fill)
    value = ctx.emit1("Expand", [ctx.const(fill.reshape((1,) * len(shape)))], shape=shape)
    if dynamic is not None:
        bound_by_shape(ctx.builder, value, dynamic)
    return value


@converter("Shape", since_version=1)
def shape_of(ctx: ConvertContext) -> str:
    shape = ctx.shape(0)
    rank = len(shape)
    start, end = 0, rank
    if ctx.opset >= 15:
        start, end = int(ctx.attr("start", 0)), int(ctx.attr("end", rank))
        start = min(max(start + rank if start < 0 else start, 0), rank)
        end = min(max(end + rank if end < 0 else end, 0), rank)
    if ctx.input(0) in ctx.builder.bounds:  # a data-dependent length: the shape is known at run time
        return runtime_shape(ctx.builder, ctx.input(0), start, end)
    return ctx.const(np.asarray(shape[start:end], dtype=np.int64))


@converter("Size", since_version=1)
def size_of(ctx: ConvertContext) -> str:
    if ctx.input(0) in ctx.builder.bounds:
        return runtime_size(ctx.builder, ctx.input(0))
    return ctx.const(np.asarray(ctx.type_of(0).numel, dtype=np.int64))


@converter("Range", since_version=11)
def value_range(ctx: ConvertContext) -> str:
    start, limit, delta = (ctx.constant(i, name).reshape(()) for i, name in enumerate(("start", "limit", "delta")))
    if delta == 0:
        ctx.fail("delta must not be 0")
    count = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)
    _check_size(ctx, count)
    values = start + np.arange(count).astype(start.dtype) * delta
    return ctx.const(values.astype(start.dtype))
