"""Reductions: axes from the attribute (older opsets) or a constant input (ReduceSum 13+, others 18+),
normalized to sorted non-negative axes; ReduceL1/L2/SumSquare/LogSum/LogSumExp are decomposed;
ArgMax/ArgMin over one axis; CumSum/CumProd along one axis."""
from __future__ import annotations

import numpy as np

from .registry import ConvertContext, converter

_DIRECT = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd")
_DECOMPOSED = ("ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp")


def reduce_axes(ctx: ConvertContext) -> tuple[int, ...] | None:
    """Sorted axes to reduce, or None when the node is an identity (noop_with_empty_axes)."""
    rank = ctx.type_of(0).rank
    axes_as_input = ctx.opset >= (13 if ctx.op_type == "ReduceSum" else 18)
    if axes_as_input:
        value = ctx.optional_constant(1, "axes")
        given = None if value is None else [int(a) for a in value.reshape(-1)]
    else:
        given = None if ctx.attr("axes") is None else [int(a) for a in ctx.attr("axes")]
    if not given:
        if axes_as_input and ctx.attr("noop_with_empty_axes", 0):
            return None
        return tuple(range(rank))
    axes = sorted({ctx.axis(a, rank, "axes") for a in given})
    return tuple(axes)


# Over an empty axis these reductions are their identity everywhere (ONNX: max -inf, min +inf, log-sum-exp
# log(0) = -inf), known at compile time. ReduceSum/ReduceProd kernels already start from 0 and 1.
_EMPTY_AXIS_FILL = {"ReduceMax": -np.inf, "ReduceMin": np.inf, "ReduceLogSumExp": -np.inf}


def _empty_axis_result(ctx: ConvertContext, axes: tuple[int, ...]) -> str | None:
    shape, dtype = ctx.shape(0), np.dtype(ctx.type_of(0).dtype)
    if ctx.op_type not in _EMPTY_AXIS_FILL or not any(shape[a] == 0 for a in axes):
        return None
    keepdims = int(ctx.attr("keepdims", 1))
    out_shape = [1 if a in axes else d for a, d in enumerate(shape) if keepdims or a not in axes]
    fill = _EMPTY_AXIS_FILL[ctx.op_type]
    if dtype.kind in "iu":  # integers have no infinity: the extreme value stands in for it
        fill = np.iinfo(dtype).min if fill < 0 else np.iinfo(dtype).max
    elif dtype.kind == "b":  # max of nothing is False, min of nothing is True
        fill = fill > 0
    return ctx.const(np.full(out_shape, fill, dtype))


def _reduce(ctx: ConvertContext, op: str, value: str) -> str:
    axes = reduce_axes(ctx)
    if axes is None:
        return value
    empty = _empty_axis_result(ctx, axes)
    if empty is not None:
        return empty
    return ctx.emit1(op, [value], axes=axes, keepdims=int(ctx.attr("keepdims", 1)))


def _direct(op: str):
    def convert(ctx: ConvertContext) -> str:
        return _reduce(ctx, op, ctx.input(0))

    return convert


def _decomposed(op: str):
    def convert(ctx: ConvertContext) -> str:
        x = ctx.input(0)
        if op == "ReduceSumSquare":
            return _reduce(ctx, "ReduceSum", ctx.emit1("Mul", [x, x]))
        if op == "ReduceL1":
            return _reduce(ctx, "ReduceSum", ctx.emit1("Abs", [x]))
        if op == "ReduceL2":
            return ctx.emit1("Sqrt", [_reduce(ctx, "ReduceSum", ctx.emit1("Mul", [x, x]))])
        if op == "ReduceLogSum":
            return ctx.emit1("Log", [_reduce(ctx, "ReduceSum", x)])
        return _log_sum_exp(ctx, x)

    return convert


def _log_sum_exp(ctx: ConvertContext, x: str) -> str:
    axes = reduce_axes(ctx)
    if axes is None:
        return x
    empty = _empty_axis_result(ctx, axes)
    if empty is not None:
        return empty
    keepdims = int(ctx.attr("keepdims", 1))
    # Subtract the maximum first so that exp() cannot overflow.
    peak = ctx.emit1("ReduceMax", [x], axes=axes, keepdims=1)
    exps = ctx.emit1("Exp", [ctx.emit1("Sub", [x, peak])])
    total = ctx.emit1("Log", [ctx.emit1("ReduceSum", [exps], axes=axes, keepdims=1)])
    result = ctx.emit1("Add", [total, peak])
    if not keepdims:
        shape = ctx.builder.type_of(result).shape
        result = ctx.reshape(result, [d for a, d in enumerate(shape) if a not in axes])
    return result


for _op in _DIRECT:
    converter(_op, since_version=1)(_direct(_op))
for _op in _DECOMPOSED:
    converter(_op, since_version=1)(_decomposed(_op))


def _arg_extreme(op: str):
    def convert(ctx: ConvertContext) -> str:
        axis = ctx.axis(ctx.attr("axis", 0), ctx.type_of(0).rank)
        return ctx.emit1(op, [ctx.input(0)], axis=axis, keepdims=int(ctx.attr("keepdims", 1)),
                         select_last_index=int(ctx.attr("select_last_index", 0)))

    return convert


for _op in ("ArgMax", "ArgMin"):
    converter(_op, since_version=1)(_arg_extreme(_op))


def _cumulative(op: str):
    def convert(ctx: ConvertContext) -> str:
        axis = ctx.axis(int(ctx.constant(1, "axis").reshape(-1)[0]), ctx.type_of(0).rank)
        return ctx.emit1(op, [ctx.input(0)], axis=axis, exclusive=int(ctx.attr("exclusive", 0)),
                         reverse=int(ctx.attr("reverse", 0)))

    return convert


converter("CumSum", since_version=11)(_cumulative("CumSum"))
converter("CumProd", since_version=26)(_cumulative("CumProd"))
