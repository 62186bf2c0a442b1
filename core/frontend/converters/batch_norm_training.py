"""BatchNormalization with training_mode=1 decomposed into IR ops: normalize by the batch statistics
and return the momentum-updated running mean and (population) variance."""
from __future__ import annotations

from .registry import ConvertContext


def batch_norm_training(ctx: ConvertContext) -> list[str]:
    x_type = ctx.type_of(0)
    if x_type.rank < 2:
        ctx.fail(f"expects an (N, C, ...) input, got {x_type}")
    x, channels = ctx.input(0), x_type.shape[1]
    channel_shape = (channels,) + (1,) * (x_type.rank - 2)
    axes = (0,) + tuple(range(2, x_type.rank))  # every axis but the channel
    epsilon = float(ctx.attr("epsilon", 1e-5))
    momentum = float(ctx.attr("momentum", 0.9))

    batch_mean = ctx.emit1("ReduceMean", [x], axes=axes, keepdims=1)
    centered = ctx.emit1("Sub", [x, batch_mean])
    batch_var = ctx.emit1("ReduceMean", [ctx.emit1("Mul", [centered, centered])], axes=axes, keepdims=1)
    std = ctx.emit1("Sqrt", [ctx.emit1("Add", [batch_var, ctx.scalar_like(epsilon, batch_var)])])
    scale, bias = (ctx.reshape(ctx.input(i), channel_shape) for i in (1, 2))
    y = ctx.emit1("Add", [ctx.emit1("Mul", [ctx.emit1("Div", [centered, std]), scale]), bias])

    def running(index: int, batch_stat: str) -> str:
        # running = input * momentum + batch * (1 - momentum), per channel
        previous = ctx.input(index)
        kept = ctx.emit1("Mul", [previous, ctx.scalar_like(momentum, previous)])
        batch = ctx.reshape(batch_stat, (channels,))
        if ctx.type_of(index).dtype != x_type.dtype:  # opset 15 lets the running stats have their own dtype
            batch = ctx.emit1("Cast", [batch], to=ctx.type_of(index).dtype)
        return ctx.emit1("Add", [kept, ctx.emit1("Mul", [batch, ctx.scalar_like(1.0 - momentum, batch)])])

    return [y, running(3, batch_mean), running(4, batch_var)]
