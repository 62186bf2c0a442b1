"""Shape-changing ONNX ops resolved to static IR: Reshape/Flatten/Squeeze/Unsqueeze become Reshape; Tile,
DepthToSpace and SpaceToDepth become Reshape/Expand/Transpose; plus Transpose, Concat and Expand."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from core.graph.bounded import bound_by_shape, shape_operand
from core.graph.op_defs._common import broadcast_shapes

from .registry import ConvertContext, converter


def _numel(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _axes(ctx: ConvertContext, values: Sequence[int], rank: int) -> list[int]:
    axes = sorted(ctx.axis(a, rank, "axes") for a in values)
    if len(set(axes)) != len(axes):
        ctx.fail(f"axes {list(values)} repeat an axis")
    return axes


def _axes_input_or_attr(ctx: ConvertContext, since_input: int) -> list[int] | None:
    if ctx.opset >= since_input:
        value = ctx.optional_constant(1, "axes")
        return None if value is None else [int(a) for a in value.reshape(-1)]
    value = ctx.attr("axes")
    return None if value is None else [int(a) for a in value]


@converter("Reshape", since_version=5)
def reshape(ctx: ConvertContext) -> str:
    source = ctx.shape(0)
    dynamic = shape_operand(ctx.builder, ctx.input(1))
    if dynamic is not None and ctx.input(0) not in ctx.builder.bounds:
        ctx.fail("the shape is computed from a data-dependent length, but the data has a fixed size")
    # a run-time shape of a data-dependent value: its largest, the data's bound follows (core/graph/bounded.py)
    requested = list(dynamic[0]) if dynamic is not None else [int(d) for d in ctx.constant(1, "shape").reshape(-1)]
    allow_zero = ctx.opset >= 14 and ctx.attr("allowzero", 0)
    shape = []
    for i, d in enumerate(requested):
        if d == 0 and not allow_zero:
            if i >= len(source):
                ctx.fail(f"shape {requested} copies dimension {i}, which {list(source)} does not have")
            d = source[i]
        shape.append(d)
    unknown = [i for i, d in enumerate(shape) if d == -1]
    if len(unknown) > 1 or any(d < -1 for d in shape):
        ctx.fail(f"shape {requested} is not a valid Reshape target")
    if unknown:
        known = _numel([d for d in shape if d != -1])
        if known == 0 or _numel(source) % known:
            ctx.fail(f"cannot reshape {list(source)} to {requested}")
        shape[unknown[0]] = _numel(source) // known
    return ctx.reshape(ctx.input(0), shape)


@converter("Flatten", since_version=1)
def flatten(ctx: ConvertContext) -> str:
    shape = ctx.shape(0)
    axis = int(ctx.attr("axis", 1))
    if axis == len(shape):  # Flatten accepts axis in [-rank, rank]: rank flattens everything into rows
        axis = len(shape)
    else:
        axis = ctx.axis(axis, len(shape))
    return ctx.reshape(ctx.input(0), (_numel(shape[:axis]), _numel(shape[axis:])))


@converter("Squeeze", since_version=1)
def squeeze(ctx: ConvertContext) -> str:
    shape = ctx.shape(0)
    given = _axes_input_or_attr(ctx, since_input=13)
    if given is None:
        axes = [a for a, d in enumerate(shape) if d == 1]
    else:
        axes = _axes(ctx, given, len(shape))
        if any(shape[a] != 1 for a in axes):
            ctx.fail(f"cannot squeeze axes {axes} of {list(shape)}: they are not 1")
    return ctx.reshape(ctx.input(0), [d for a, d in enumerate(shape) if a not in axes])


@converter("Unsqueeze", since_version=1)
def unsqueeze(ctx: ConvertContext) -> str:
    shape = list(ctx.shape(0))
    given = _axes_input_or_attr(ctx, since_input=13)
    if given is None:
        ctx.fail("axes are required")
    rank = len(shape) + len(given)
    axes = _axes(ctx, given, rank)
    for a in axes:
        shape.insert(a, 1)
    return ctx.reshape(ctx.input(0), shape)


@converter("Transpose", since_version=1)
def transpose(ctx: ConvertContext) -> str:
    rank = ctx.type_of(0).rank
    perm = tuple(int(p) for p in ctx.attr("perm", range(rank - 1, -1, -1)))
    if perm == tuple(range(rank)):
        return ctx.input(0)
    return ctx.emit1("Transpose", [ctx.input(0)], perm=perm)


@converter("Concat", since_version=1)
def concat(ctx: ConvertContext) -> str:
    inputs = [ctx.input(i) for i in range(len(ctx.inputs))]
    axis = ctx.axis(ctx.attr("axis", 1), ctx.type_of(0).rank)
    return ctx.emit1("Concat", inputs, axis=axis)


@converter("Expand", since_version=8)
def expand(ctx: ConvertContext) -> str:
    dynamic = shape_operand(ctx.builder, ctx.input(1))  # the shape of a data-dependent value: at its largest
    requested = dynamic[0] if dynamic is not None else tuple(int(d) for d in ctx.constant(1, "shape").reshape(-1))
    shape = broadcast_shapes(ctx.where, ctx.shape(0), requested)
    value = ctx.emit1("Expand", [ctx.input(0)], shape=shape) if shape != ctx.shape(0) else ctx.input(0)
    if dynamic is not None:
        bound_by_shape(ctx.builder, value, dynamic)
    return value


@converter("Tile", since_version=6)
def tile(ctx: ConvertContext) -> str:
    shape = ctx.shape(0)
    repeats = [int(r) for r in ctx.constant(1, "repeats").reshape(-1)]
    if len(repeats) != len(shape) or any(r < 0 for r in repeats):
        ctx.fail(f"repeats {repeats} must be {len(shape)} non-negative ints")
    if all(r == 1 for r in repeats):
        return ctx.input(0)
    # Tile == interleave a unit axis before every axis, broadcast it to the repeat, then merge pairs.
    interleaved = [v for d in shape for v in (1, d)]
    expanded = [v for r, d in zip(repeats, shape) for v in (r, d)]
    spread = ctx.emit1("Expand", [ctx.reshape(ctx.input(0), interleaved)], shape=tuple(expanded))
    return ctx.reshape(spread, [r * d for r, d in zip(repeats, shape)])


def _block_rearrange(ctx: ConvertContext, split: Sequence[int], perm: Sequence[int], merged: Sequence[int]) -> str:
    if any(d <= 0 for d in split):
        ctx.fail(f"blocksize does not divide the input {list(ctx.shape(0))}")
    moved = ctx.emit1("Transpose", [ctx.reshape(ctx.input(0), split)], perm=tuple(perm))
    return ctx.reshape(moved, merged)


def _blocks(ctx: ConvertContext) -> tuple[int, int, int, int, int]:
    if ctx.type_of(0).rank != 4:
        ctx.fail(f"expects a 4-D NCHW input, got {ctx.type_of(0)}")
    return (*ctx.shape(0), int(ctx.attr("blocksize")))  # type: ignore[return-value]


@converter("DepthToSpace", since_version=1)
def depth_to_space(ctx: ConvertContext) -> str:
    n, c, h, w, b = _blocks(ctx)
    if c % (b * b):
        ctx.fail(f"channels {c} are not a multiple of blocksize^2 = {b * b}")
    merged = (n, c // (b * b), h * b, w * b)
    if ctx.attr("mode", "DCR") == "CRD":
        return _block_rearrange(ctx, (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3), merged)
    return _block_rearrange(ctx, (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2), merged)


@converter("SpaceToDepth", since_version=1)
def space_to_depth(ctx: ConvertContext) -> str:
    n, c, h, w, b = _blocks(ctx)
    if h % b or w % b:
        ctx.fail(f"spatial size {h}x{w} is not a multiple of blocksize {b}")
    # CRD (opset 25's mode attribute) keeps each channel's block together; DCR, the default, leads with the block offsets.
    perm = (0, 1, 3, 5, 2, 4) if ctx.attr("mode", "DCR") == "CRD" else (0, 3, 5, 1, 2, 4)
    return _block_rearrange(ctx, (n, c, h // b, b, w // b, b), perm, (n, c * b * b, h // b, w // b))
