"""Conv: 2-D directly, 1-D through a unit-height 2-D conv; auto_pad resolved to explicit pads."""
from __future__ import annotations

from .registry import ConvertContext, converter
from .windows import as_2d, lift_1d, lower_1d, resolve_window, spatial_rank


@converter("Conv", since_version=1)
def conv(ctx: ConvertContext) -> str:
    spatial = spatial_rank(ctx, "convolution")
    weights = ctx.type_of(1)
    if weights.rank != spatial + 2:
        ctx.fail(f"weights {weights} do not match a {spatial}-D convolution")
    kernel = weights.shape[2:]
    declared = ctx.attr("kernel_shape")
    if declared is not None and tuple(declared) != kernel:
        ctx.fail(f"kernel_shape {list(declared)} disagrees with weights {weights}")
    window = resolve_window(ctx, ctx.shape(0)[2:], kernel)
    _, strides, dilations, pads = as_2d(window)
    x, w = ctx.input(0), ctx.input(1)
    inputs = [x, w] + ([ctx.input(2)] if ctx.has_input(2) else [])
    if spatial == 1:
        inputs = [lift_1d(ctx, x), lift_1d(ctx, w)] + inputs[2:]
    y = ctx.emit1("Conv", inputs, strides=strides, pads=pads, dilations=dilations, group=int(ctx.attr("group", 1)))
    return lower_1d(ctx, y) if spatial == 1 else y
