"""BatchNormalization and InstanceNormalization decomposed into elementwise ops, LayerNormalization,
and Softmax/LogSoftmax (opset < 13 coerce-to-2-D semantics rebuilt with Reshape)."""
from __future__ import annotations

import numpy as np

from .batch_norm_training import batch_norm_training
from .registry import ConvertContext, converter


def _per_channel_shape(ctx: ConvertContext) -> tuple[int, ...]:
    x = ctx.type_of(0)
    if x.rank < 2:
        ctx.fail(f"expects an (N, C, ...) input, got {x}")
    return (x.shape[1],) + (1,) * (x.rank - 2)


@converter("BatchNormalization", since_version=7)
def batch_norm(ctx: ConvertContext) -> str:
    if ctx.attr("training_mode", 0):
        return batch_norm_training(ctx)
    if ctx.opset < 9 and ctx.attr("spatial", 1) == 0:
        ctx.unsupported("BatchNormalization with spatial=0")
    ctx.reject_extra_outputs(1, "Y (running statistics are not)")
    x, dtype = ctx.input(0), ctx.type_of(0).dtype
    epsilon = float(ctx.attr("epsilon", 1e-5))
    channel = _per_channel_shape(ctx)
    params = [ctx.builder.constant_value(ctx.input(i)) for i in range(1, 5)]
    if all(p is not None for p in params):
        # Inference BN is one multiply-add per channel; precompute it in float64.
        scale, bias, mean, var = (p.astype(np.float64) for p in params)
        factor = scale / np.sqrt(var + epsilon)
        shift = bias - mean * factor
        y = ctx.emit1("Mul", [x, ctx.const(factor.reshape(channel).astype(dtype))])
        return ctx.emit1("Add", [y, ctx.const(shift.reshape(channel).astype(dtype))])
    scale, bias, mean, var = (ctx.reshape(ctx.input(i), channel) for i in range(1, 5))
    centered = ctx.emit1("Sub", [x, mean])
    std = ctx.emit1("Sqrt", [ctx.emit1("Add", [var, ctx.scalar_like(epsilon, var)])])
    normalized = ctx.emit1("Div", [centered, std])
    return ctx.emit1("Add", [ctx.emit1("Mul", [normalized, scale]), bias])


@converter("InstanceNormalization", since_version=6)
def instance_norm(ctx: ConvertContext) -> str:
    x = ctx.input(0)
    axes = tuple(range(2, ctx.type_of(0).rank))
    channel = _per_channel_shape(ctx)
    mean = ctx.emit1("ReduceMean", [x], axes=axes, keepdims=1)
    centered = ctx.emit1("Sub", [x, mean])
    var = ctx.emit1("ReduceMean", [ctx.emit1("Mul", [centered, centered])], axes=axes, keepdims=1)
    epsilon = float(ctx.attr("epsilon", 1e-5))
    std = ctx.emit1("Sqrt", [ctx.emit1("Add", [var, ctx.scalar_like(epsilon, var)])])
    scaled = ctx.emit1("Mul", [ctx.emit1("Div", [centered, std]), ctx.reshape(ctx.input(1), channel)])
    return ctx.emit1("Add", [scaled, ctx.reshape(ctx.input(2), channel)])


@converter("LayerNormalization", since_version=17)
def layer_norm(ctx: ConvertContext) -> str:
    ctx.reject_extra_outputs(1, "Y (Mean and InvStdDev are not)")
    axis = ctx.axis(ctx.attr("axis", -1), ctx.type_of(0).rank)
    inputs = [ctx.input(0), ctx.input(1)] + ([ctx.input(2)] if ctx.has_input(2) else [])
    return ctx.emit1("LayerNormalization", inputs, axis=axis, epsilon=float(ctx.attr("epsilon", 1e-5)))


def _softmax_legacy(ctx: ConvertContext, op: str) -> str:
    shape = ctx.shape(0)
    axis = ctx.axis(ctx.attr("axis", 1), len(shape))
    if axis == len(shape) - 1:
        return ctx.emit1(op, [ctx.input(0)], axis=axis)
    # Before opset 13 the input is viewed as a matrix [prod(dims < axis), prod(dims >= axis)].
    rows = int(np.prod(shape[:axis], dtype=np.int64))
    matrix = ctx.reshape(ctx.input(0), (rows, int(np.prod(shape[axis:], dtype=np.int64))))
    return ctx.reshape(ctx.emit1(op, [matrix], axis=1), shape)


def _softmax(ctx: ConvertContext, op: str) -> str:
    return ctx.emit1(op, [ctx.input(0)], axis=ctx.axis(ctx.attr("axis", -1), ctx.type_of(0).rank))


@converter("Softmax", since_version=1)
def softmax_legacy(ctx: ConvertContext) -> str:
    return _softmax_legacy(ctx, "Softmax")


@converter("Softmax", since_version=13)
def softmax(ctx: ConvertContext) -> str:
    return _softmax(ctx, "Softmax")


@converter("LogSoftmax", since_version=1)
def log_softmax_legacy(ctx: ConvertContext) -> str:
    return _softmax_legacy(ctx, "LogSoftmax")


@converter("LogSoftmax", since_version=13)
def log_softmax(ctx: ConvertContext) -> str:
    return _softmax(ctx, "LogSoftmax")
