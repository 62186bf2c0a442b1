"""BatchNormalization and InstanceNormalization decomposed into elementwise ops, LayerNormalization
(its Mean/InvStdDev outputs: fused kernel, or the function body for float64), RMSNormalization, GroupNormalization,
MeanVarianceNormalization, LpNormalization and LRN decomposed into reductions and elementwise ops, and
Softmax/LogSoftmax (opset < 13 coerce-to-2-D semantics rebuilt with Reshape)."""
from __future__ import annotations

import numpy as np

from .batch_norm_training import batch_norm_training
from ..onnx_values import numpy_dtype
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


def _stashed(ctx: ConvertContext, x: str) -> str:
    """`x` in the op's stash_type (the precision its statistics are computed in; float32 by default)."""
    stash = numpy_dtype(int(ctx.attr("stash_type", 1)), ctx.where)
    return x if ctx.builder.type_of(x).dtype == stash else ctx.emit1("Cast", [x], to=stash)


def _cast_back(ctx: ConvertContext, value: str) -> str:
    dtype = ctx.type_of(0).dtype
    return value if ctx.builder.type_of(value).dtype == dtype else ctx.emit1("Cast", [value], to=dtype)


def _scale_and_shift(ctx: ConvertContext, normalized: str) -> str:
    y = ctx.emit1("Mul", [_cast_back(ctx, normalized), ctx.input(1)])
    return ctx.emit1("Add", [y, ctx.input(2)]) if ctx.has_input(2) else y


@converter("LayerNormalization", since_version=17)
def layer_norm(ctx: ConvertContext) -> list[str]:
    axis = ctx.axis(ctx.attr("axis", -1), ctx.type_of(0).rank)
    epsilon = float(ctx.attr("epsilon", 1e-5))
    inputs = [ctx.input(0), ctx.input(1)] + ([ctx.input(2)] if ctx.has_input(2) else [])
    if not (ctx.output_used(1) or ctx.output_used(2)):  # Y alone: the fused native kernel
        return [ctx.emit1("LayerNormalization", inputs, axis=axis, epsilon=epsilon)]
    if ctx.type_of(0).dtype in ("float16", "float32") and int(ctx.attr("stash_type", 1)) == 1:
        # The fused kernel computes in float32 and also gives the (float32) statistics.
        statistics = 2 if ctx.output_used(2) else 1
        return ctx.emit("LayerNormalization", inputs, 1 + statistics, axis=axis, epsilon=epsilon, statistics=statistics)
    # ONNX's function body, which also yields the statistics (in stash_type, keepdims shape).
    x = _stashed(ctx, ctx.input(0))
    axes = tuple(range(axis, ctx.type_of(0).rank))
    mean = ctx.emit1("ReduceMean", [x], axes=axes, keepdims=1)
    centered = ctx.emit1("Sub", [x, mean])
    variance = ctx.emit1("ReduceMean", [ctx.emit1("Mul", [centered, centered])], axes=axes, keepdims=1)
    std = ctx.emit1("Sqrt", [ctx.emit1("Add", [variance, ctx.scalar_like(epsilon, variance)])])
    inv_std = ctx.emit1("Reciprocal", [std])
    return [_scale_and_shift(ctx, ctx.emit1("Mul", [centered, inv_std])), mean, inv_std]


@converter("RMSNormalization", since_version=23)
def rms_norm(ctx: ConvertContext) -> str:
    return rms_norm_of(ctx, ctx.input(0), ctx.input(1))


def rms_norm_of(ctx: ConvertContext, value: str, scale: str) -> str:
    """`value` (input 0's type) over its axes from attribute `axis` on, divided by their root mean
    square (computed in stash_type, with attribute `epsilon`), times `scale`."""
    axis = ctx.axis(ctx.attr("axis", -1), ctx.type_of(0).rank)
    x = _stashed(ctx, value)
    axes = tuple(range(axis, ctx.type_of(0).rank))
    mean_square = ctx.emit1("ReduceMean", [ctx.emit1("Mul", [x, x])], axes=axes, keepdims=1)
    epsilon = ctx.scalar_like(float(ctx.attr("epsilon", 1e-5)), mean_square)
    rms = ctx.emit1("Sqrt", [ctx.emit1("Add", [mean_square, epsilon])])
    return ctx.emit1("Mul", [_cast_back(ctx, ctx.emit1("Div", [x, rms])), scale])


@converter("GroupNormalization", since_version=21)
def group_norm(ctx: ConvertContext) -> str:
    shape = ctx.shape(0)
    groups = int(ctx.attr("num_groups"))
    if len(shape) < 2 or groups <= 0 or shape[1] % groups:
        ctx.fail(f"num_groups={groups} must divide the channels of an (N, C, ...) input, got {list(shape)}")
    # Statistics per (sample, group): view the input as [N, groups, C/groups * spatial].
    grouped = ctx.reshape(_stashed(ctx, ctx.input(0)), (shape[0], groups, int(np.prod(shape[1:])) // groups))
    mean = ctx.emit1("ReduceMean", [grouped], axes=(2,), keepdims=1)
    centered = ctx.emit1("Sub", [grouped, mean])
    variance = ctx.emit1("ReduceMean", [ctx.emit1("Mul", [centered, centered])], axes=(2,), keepdims=1)
    epsilon = ctx.scalar_like(float(ctx.attr("epsilon", 1e-5)), variance)
    normalized = ctx.emit1("Div", [centered, ctx.emit1("Sqrt", [ctx.emit1("Add", [variance, epsilon])])])
    y = ctx.reshape(_cast_back(ctx, normalized), shape)
    channel = _per_channel_shape(ctx)
    y = ctx.emit1("Mul", [y, ctx.reshape(ctx.input(1), channel)])
    return ctx.emit1("Add", [y, ctx.reshape(ctx.input(2), channel)])


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


@converter("LpNormalization", since_version=1)
def lp_norm(ctx: ConvertContext) -> str:
    x, p = ctx.input(0), int(ctx.attr("p", 2))
    axes = (ctx.axis(ctx.attr("axis", -1), ctx.type_of(0).rank),)
    if p == 1:
        norm = ctx.emit1("ReduceSum", [ctx.emit1("Abs", [x])], axes=axes, keepdims=1)
    elif p == 2:
        norm = ctx.emit1("Sqrt", [ctx.emit1("ReduceSum", [ctx.emit1("Mul", [x, x])], axes=axes, keepdims=1)])
    else:
        ctx.fail(f"p must be 1 or 2, got {p}")
    # A zero norm yields 0 rather than 0/0 = NaN (ONNX's reference since opset 22).
    zero = ctx.scalar_like(0, x)
    return ctx.emit1("Where", [ctx.emit1("Equal", [norm, zero]), zero, ctx.emit1("Div", [x, norm])])


@converter("LRN", since_version=1)
def lrn(ctx: ConvertContext) -> str:
    x, shape = ctx.input(0), ctx.shape(0)
    size = int(ctx.attr("size"))
    if len(shape) < 3 or size < 1:
        ctx.fail(f"expects an (N, C, D1, ...) input and size >= 1, got {list(shape)} and size={size}")
    # Sum of squares over the channel window [c - floor((size-1)/2), c + ceil((size-1)/2)]: the
    # squares zero-padded along C, then `size` shifted channel slices added up.
    before = (size - 1) // 2
    rank = len(shape)
    pads = [0] * (2 * rank)
    pads[1], pads[1 + rank] = before, size - 1 - before
    padded = ctx.emit1("Pad", [ctx.emit1("Mul", [x, x])], pads=tuple(pads), mode="constant", value=0.0)
    square_sum = None
    for offset in range(size):
        window = ctx.emit1("Slice", [padded], starts=(0, offset) + (0,) * (rank - 2), steps=(1,) * rank,
                           sizes=tuple(shape))
        square_sum = window if square_sum is None else ctx.emit1("Add", [square_sum, window])
    alpha, beta, bias = float(ctx.attr("alpha", 1e-4)), float(ctx.attr("beta", 0.75)), float(ctx.attr("bias", 1.0))
    scaled = ctx.emit1("Mul", [square_sum, ctx.scalar_like(alpha / size, x)])
    base = ctx.emit1("Add", [scaled, ctx.scalar_like(bias, x)])
    return ctx.emit1("Div", [x, ctx.emit1("Pow", [base, ctx.scalar_like(beta, x)])])


@converter("MeanVarianceNormalization", since_version=9)
def mean_variance_norm(ctx: ConvertContext) -> str:
    # ONNX's function body: (X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9).
    x, rank = ctx.input(0), ctx.type_of(0).rank
    axes = tuple(sorted({ctx.axis(a, rank, "axes") for a in ctx.attr("axes", (0, 2, 3))}))
    mean = ctx.emit1("ReduceMean", [x], axes=axes, keepdims=1)
    mean_of_squares = ctx.emit1("ReduceMean", [ctx.emit1("Mul", [x, x])], axes=axes, keepdims=1)
    variance = ctx.emit1("Sub", [mean_of_squares, ctx.emit1("Mul", [mean, mean])])
    std = ctx.emit1("Add", [ctx.emit1("Sqrt", [variance]), ctx.scalar_like(1e-9, x)])
    return ctx.emit1("Div", [ctx.emit1("Sub", [x, mean]), std])
