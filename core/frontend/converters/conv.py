"""Conv: 2-D directly, 1-D through a unit-height 2-D conv, 3-D on ConvND; auto_pad resolved to explicit pads."""
from __future__ import annotations

from .registry import ConvertContext, converter
from .windows import as_2d, lift_1d, lower_1d, resolve_window, spatial_rank


@converter("Conv", since_version=1)
def conv(ctx: ConvertContext) -> str:
    spatial = spatial_rank(ctx, "convolution", most=3)
    weights = ctx.type_of(1)
    if weights.rank != spatial + 2:
        ctx.fail(f"weights {weights} do not match a {spatial}-D convolution")
    kernel = weights.shape[2:]
    declared = ctx.attr("kernel_shape")
    if declared is not None and tuple(declared) != kernel:
        ctx.fail(f"kernel_shape {list(declared)} disagrees with weights {weights}")
    window = resolve_window(ctx, ctx.shape(0)[2:], kernel)
    x, w = ctx.input(0), ctx.input(1)
    inputs = [x, w] + ([ctx.input(2)] if ctx.has_input(2) else [])
    group = int(ctx.attr("group", 1))
    if spatial == 3:
        return ctx.emit1("ConvND", inputs, strides=window.strides, dilations=window.dilations, pads=window.pads,
                         group=group)
    _, strides, dilations, pads = as_2d(window)
    if spatial == 1:
        inputs = [lift_1d(ctx, x), lift_1d(ctx, w)] + inputs[2:]
    y = ctx.emit1("Conv", inputs, strides=strides, pads=pads, dilations=dilations, group=group)
    return lower_1d(ctx, y) if spatial == 1 else y
