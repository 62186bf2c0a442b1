"""Losses and softmax-derived ops decomposed into IR ops: NegativeLogLikelihoodLoss,
SoftmaxCrossEntropyLoss (LogSoftmax + NLL) and Hardmax (first arg-max as a one-hot)."""
from __future__ import annotations

import numpy as np

from .registry import ConvertContext, converter

_REDUCTIONS = ("none", "sum", "mean")


def _reduction(ctx: ConvertContext) -> str:
    reduction = ctx.attr("reduction", "mean")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction not in _REDUCTIONS:
        ctx.fail(f"reduction must be one of {', '.join(_REDUCTIONS)}, got {reduction!r}")
    return reduction


def _class_scores_shape(ctx: ConvertContext, scores: str, target: str) -> tuple[int, ...]:
    shape, target_shape = ctx.builder.type_of(scores).shape, ctx.builder.type_of(target).shape
    if len(shape) < 2 or target_shape != shape[:1] + shape[2:]:
        ctx.fail(f"expects scores (N, C, d1, ...) and target (N, d1, ...), got {list(shape)} and "
                 f"{list(target_shape)}")
    return shape


def negative_log_likelihood(ctx: ConvertContext, log_prob: str, target: str, weight: str | None) -> str:
    """-log_prob[n, target[n, d...], d...], weighted, with ignore_index masked out, then reduced."""
    shape = _class_scores_shape(ctx, log_prob, target)
    target_shape = ctx.builder.type_of(target).shape
    ignore_index = ctx.attr("ignore_index")
    keep = None
    if ignore_index is not None:
        keep = ctx.emit1("Not", [ctx.emit1("Equal", [target, ctx.scalar_like(int(ignore_index), target)])])
    # Ignored targets may lie outside [0, C) (the tests use negative and too-high ones): clamp so
    # that the gathers below never read out of bounds; the mask drops those entries afterwards.
    safe_target = ctx.emit1("Clip", [target], min=0.0, max=float(shape[1] - 1))
    index = ctx.reshape(safe_target, target_shape[:1] + (1,) + target_shape[1:])
    picked = ctx.reshape(ctx.emit1("GatherElements", [log_prob, index], axis=1), target_shape)
    loss = ctx.emit1("Neg", [picked])
    zero = ctx.scalar_like(0, loss)
    weights = None  # per-element weight; also the denominator of a weighted mean
    if weight is not None:
        weights = ctx.emit1("Gather", [weight, safe_target], axis=0)
        if keep is not None:
            weights = ctx.emit1("Where", [keep, weights, zero])
    elif keep is not None:
        weights = ctx.emit1("Cast", [keep], to=ctx.builder.type_of(loss).dtype)
    if keep is not None:
        loss = ctx.emit1("Where", [keep, loss, zero])  # 0, not 0 * log_prob, when log_prob is -inf there
    if weight is not None:
        loss = ctx.emit1("Mul", [loss, weights])

    reduction = _reduction(ctx)
    if reduction == "none":
        return loss
    every_axis = tuple(range(len(target_shape)))
    total = ctx.emit1("ReduceSum", [loss], axes=every_axis, keepdims=0)
    if reduction == "sum":
        return total
    if weights is None:
        return ctx.emit1("ReduceMean", [loss], axes=every_axis, keepdims=0)
    return ctx.emit1("Div", [total, ctx.emit1("ReduceSum", [weights], axes=every_axis, keepdims=0)])


@converter("NegativeLogLikelihoodLoss", since_version=12)
def negative_log_likelihood_loss(ctx: ConvertContext) -> str:
    weight = ctx.input(2) if ctx.has_input(2) else None
    return negative_log_likelihood(ctx, ctx.input(0), ctx.input(1), weight)


@converter("SoftmaxCrossEntropyLoss", since_version=12)
def softmax_cross_entropy_loss(ctx: ConvertContext) -> list[str]:
    scores = ctx.input(0)
    _class_scores_shape(ctx, scores, ctx.input(1))
    log_prob = ctx.emit1("LogSoftmax", [scores], axis=1)
    weight = ctx.input(2) if ctx.has_input(2) else None
    return [negative_log_likelihood(ctx, log_prob, ctx.input(1), weight), log_prob]


def _hardmax(ctx: ConvertContext, x: str, axis: int) -> str:
    """One-hot of the first maximum along `axis`: ties go to the lowest index, as in ONNX."""
    x_type = ctx.builder.type_of(x)
    width = x_type.shape[axis]
    positions = ctx.const(np.arange(width, dtype=np.int64).reshape(
        [width if a == axis else 1 for a in range(x_type.rank)]))
    peak = ctx.emit1("ReduceMax", [x], axes=(axis,), keepdims=1)
    at_peak = ctx.emit1("Equal", [x, peak])
    # Positions off the peak become `width`, so the minimum is the first peak position.
    candidates = ctx.emit1("Where", [at_peak, positions, ctx.const(np.int64(width))])
    first = ctx.emit1("ReduceMin", [candidates], axes=(axis,), keepdims=1)
    return ctx.emit1("Cast", [ctx.emit1("Equal", [positions, first])], to=x_type.dtype)


@converter("Hardmax", since_version=1)
def hardmax_legacy(ctx: ConvertContext) -> str:
    shape = ctx.shape(0)
    axis = ctx.axis(ctx.attr("axis", 1), len(shape))
    # Before opset 13 the input is viewed as a matrix [prod(dims < axis), prod(dims >= axis)].
    rows = int(np.prod(shape[:axis], dtype=np.int64))
    matrix = ctx.reshape(ctx.input(0), (rows, int(np.prod(shape[axis:], dtype=np.int64))))
    return ctx.reshape(_hardmax(ctx, matrix, 1), shape)


@converter("Hardmax", since_version=13)
def hardmax(ctx: ConvertContext) -> str:
    return _hardmax(ctx, ctx.input(0), ctx.axis(ctx.attr("axis", -1), ctx.type_of(0).rank))
