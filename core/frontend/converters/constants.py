"""Ops whose values are known at import (shapes are static): Constant, ConstantOfShape, Shape,
Size and Range all become constants (ConstantOfShape via a foldable Expand of its scalar); the
shape or size of a value with a data-dependent length is computed at run time instead."""
from __future__ import annotations

import numpy as np

from core.graph.bounded import (Bound, arithmetic, bound_by_shape, length_constant, runtime_shape, runtime_size,
                                shape_operand)
from core.graph.length_inputs import largest_length, simplest_length

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
    if ctx.input(1) in ctx.builder.runtime_ints:
        return _run_time_range(ctx)
    start, limit, delta = (ctx.constant(i, name).reshape(()) for i, name in enumerate(("start", "limit", "delta")))
    if delta == 0:
        ctx.fail("delta must not be 0")
    count = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)
    _check_size(ctx, count)
    values = start + np.arange(count).astype(start.dtype) * delta
    return ctx.const(values.astype(start.dtype))


def _run_time_range(ctx: ConvertContext) -> str:
    """Range(start, limit) with a run-time limit (a length, or one computed from lengths: a KV cache's
    positions past..past + new) and step 1: the values at the largest count, bounded by limit - start
    (core/graph/bounded.py)."""
    b = ctx.builder
    delta = ctx.constant(2, "delta").reshape(())
    if delta != 1:
        ctx.fail("a Range with a run-time limit takes step 1 only")
    if np.dtype(b.type_of(ctx.input(1)).dtype).kind == "f":  # its count would round up a float difference
        ctx.unsupported("a float Range with a limit computed at run time")
    start = b.constant_value(ctx.input(0))
    if start is None and ctx.input(0) not in b.runtime_ints:
        ctx.fail("start (input 0) is computed at run time, but not from input sizes")
    ends = [b.add_unbounded_node("Cast", [b.add_unbounded_node("Reshape", [ctx.input(i)], 1, "length", shape=(1,))[0]],
                                 1, "length", to="int64")[0] for i in (0, 1)]
    length = arithmetic(b, "Max", arithmetic(b, "Sub", ends[1], ends[0]), length_constant(b, 0))
    count = largest_length(b, length)
    if count is None:  # the limit at its largest, from a start of at least 0
        count = int(b.runtime_ints[ctx.input(1)].reshape(-1)[0]) - (int(start) if start is not None else 0)
    count = max(count, 0)
    _check_size(ctx, count)
    dtype = b.type_of(ctx.input(0)).dtype
    if start is not None:
        values = ctx.const((start.reshape(()) + np.arange(count)).astype(dtype))
    else:
        offsets = ctx.const(np.arange(count).astype(dtype))
        values = b.add_unbounded_node("Add", [offsets, ctx.input(0)], 1, ctx.hint)[0]
    b.runtime_ints[length] = np.array([count], np.int64)
    length = simplest_length(b, length)
    if not _is_constant(b, length, count):  # a count fixed in this bucket (one new token): no run-time length
        b.bounds[values] = Bound(length, 0)
    return values


def _is_constant(builder, value: str, count: int) -> bool:
    constant = builder.constant_value(value)
    return constant is not None and int(constant.reshape(-1)[0]) == count
