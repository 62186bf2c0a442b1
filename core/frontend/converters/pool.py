"""MaxPool, AveragePool (1-D and 2-D on the tuned 2-D ops; 3-D and dilated averages on PoolND), LpPool
(PoolND) and the global pools (4-D as IR ops, other ranks as reductions)."""
from __future__ import annotations

from .registry import ConvertContext, converter
from .windows import as_2d, lift_1d, lower_1d, resolve_window, spatial_rank


def _pool_nd(ctx: ConvertContext, mode: str) -> str:
    """Any spatial rank on the generic PoolND op."""
    x = ctx.type_of(0)
    if x.rank < 3:
        ctx.fail(f"expects an (N, C, D1, ...) input, got {x}")
    kernel = tuple(int(k) for k in ctx.attr("kernel_shape", ()))
    if len(kernel) != x.rank - 2:
        ctx.fail(f"kernel_shape {list(kernel)} does not match a {x.rank - 2}-D input")
    window = resolve_window(ctx, x.shape[2:], kernel)
    attrs = dict(mode=mode, kernel=kernel, strides=window.strides, dilations=window.dilations, pads=window.pads,
                 ceil_mode=int(ctx.attr("ceil_mode", 0)))
    if mode == "avg":
        attrs["count_include_pad"] = int(ctx.attr("count_include_pad", 0))
    if mode == "lp":
        attrs["p"] = int(ctx.attr("p", 2))
        if attrs["p"] < 1:
            ctx.fail(f"p={attrs['p']} must be at least 1")
    return ctx.emit1("PoolND", [ctx.input(0)], **attrs)


def _needs_pool_nd(ctx: ConvertContext, op: str) -> bool:
    if ctx.type_of(0).rank == 5:
        return True
    return op == "AveragePool" and any(d != 1 for d in ctx.attr("dilations", ()) or ())


def _pool(ctx: ConvertContext, op: str) -> str:
    if _needs_pool_nd(ctx, op):
        return _pool_nd(ctx, "max" if op == "MaxPool" else "avg")
    spatial = spatial_rank(ctx, "pooling")
    kernel = tuple(int(k) for k in ctx.attr("kernel_shape", ()))
    if len(kernel) != spatial:
        ctx.fail(f"kernel_shape {list(kernel)} does not match a {spatial}-D input")
    window = resolve_window(ctx, ctx.shape(0)[2:], kernel)
    kernel2, strides, dilations, pads = as_2d(window)
    x = lift_1d(ctx, ctx.input(0)) if spatial == 1 else ctx.input(0)
    attrs = dict(kernel=kernel2, strides=strides, pads=pads, ceil_mode=int(ctx.attr("ceil_mode", 0)))
    if op == "MaxPool":
        attrs["dilations"] = dilations
    else:
        if any(d != 1 for d in window.dilations):
            ctx.unsupported("AveragePool with dilations")
        attrs["count_include_pad"] = int(ctx.attr("count_include_pad", 0))
    y = ctx.emit1(op, [x], **attrs)
    return lower_1d(ctx, y) if spatial == 1 else y


@converter("MaxPool", since_version=1)
def max_pool(ctx: ConvertContext) -> str | list[str]:
    if ctx.output_used(1):
        return _max_pool_with_indices(ctx)
    return _pool(ctx, "MaxPool")


def _max_pool_with_indices(ctx: ConvertContext) -> list[str]:
    """Values and Indices on the generic N-D kernel (the tuned 2-D MaxPool has no indices)."""
    x = ctx.type_of(0)
    kernel = tuple(int(k) for k in ctx.attr("kernel_shape", ()))
    if x.rank < 3 or len(kernel) != x.rank - 2:
        ctx.fail(f"kernel_shape {list(kernel)} does not match input {x}")
    window = resolve_window(ctx, x.shape[2:], kernel)
    values, indices = ctx.emit("MaxPoolWithIndices", [ctx.input(0)], 2, kernel=kernel, strides=window.strides,
                               dilations=window.dilations, pads=window.pads, ceil_mode=int(ctx.attr("ceil_mode", 0)),
                               storage_order=int(ctx.attr("storage_order", 0)))
    return [values, indices]


@converter("AveragePool", since_version=1)
def average_pool(ctx: ConvertContext) -> str:
    return _pool(ctx, "AveragePool")


@converter("LpPool", since_version=1)
def lp_pool(ctx: ConvertContext) -> str:
    return _pool_nd(ctx, "lp")


def _global(ctx: ConvertContext, op: str, reduction: str) -> str:
    x = ctx.type_of(0)
    if x.rank < 3:
        ctx.fail(f"expects an (N, C, ...) input, got {x}")
    if x.rank == 4:
        return ctx.emit1(op, [ctx.input(0)])
    return ctx.emit1(reduction, [ctx.input(0)], axes=tuple(range(2, x.rank)), keepdims=1)


@converter("GlobalAveragePool", since_version=1)
def global_average_pool(ctx: ConvertContext) -> str:
    return _global(ctx, "GlobalAveragePool", "ReduceMean")


@converter("GlobalMaxPool", since_version=1)
def global_max_pool(ctx: ConvertContext) -> str:
    return _global(ctx, "GlobalMaxPool", "ReduceMax")


@converter("MaxUnpool", since_version=9)
def max_unpool(ctx: ConvertContext) -> str:
    x = ctx.type_of(0)
    spatial = x.rank - 2
    kernel = tuple(int(k) for k in ctx.attr("kernel_shape", ()))
    if spatial < 1 or len(kernel) != spatial:
        ctx.fail(f"kernel_shape {list(kernel)} does not match input {x}")
    strides = tuple(int(v) for v in ctx.attr("strides", [1] * spatial))
    pads = tuple(int(v) for v in ctx.attr("pads", [0] * (2 * spatial)))
    if ctx.has_input(2):
        out = tuple(int(v) for v in ctx.constant(2, "output_shape").reshape(-1))
    else:
        out = x.shape[:2] + tuple((x.shape[2 + a] - 1) * strides[a] - pads[a] - pads[spatial + a] + kernel[a]
                                  for a in range(spatial))
    return ctx.emit1("MaxUnpool", [ctx.input(0), ctx.input(1)], kernel=kernel, strides=strides, pads=pads,
                     output_shape=out)
