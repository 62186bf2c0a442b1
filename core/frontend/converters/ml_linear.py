"""ai.onnx.ml linear models: LinearRegressor and LinearClassifier as a MatMul plus intercepts, with ONNX
Runtime's labels and post_transform (one score column: labels by its sign, scores [1 - s, s])."""
from __future__ import annotations

import numpy as np

from .ml_trees import ML, as_float32, post_transform, transformed
from .registry import ConvertContext, converter


def float_rows(ctx: ConvertContext) -> str:
    """X as float32 (rows, features): a 1-D input is one row."""
    x, t = ctx.input(0), ctx.type_of(0)
    if t.dtype not in ("float32", "float64", "int64", "int32"):
        ctx.fail(f"X has dtype {t.dtype}; expected float, double, int64 or int32")
    if t.rank == 1:
        x = ctx.reshape(x, (1, t.shape[0]))
    elif t.rank != 2:
        ctx.fail(f"expects X of shape (rows, features), got {t}")
    return as_float32(ctx, x)


def _linear(ctx: ConvertContext, x: str, outputs: int) -> str:
    """x @ coefficients.T + intercepts, (rows, outputs)."""
    features = ctx.builder.type_of(x).shape[1]
    coefficients = np.asarray(ctx.attr("coefficients", []), np.float32)
    if coefficients.size != outputs * features:
        ctx.fail(f"{coefficients.size} coefficients for {outputs} outputs of {features} features")
    scores = ctx.emit1("MatMul", [x, ctx.const(coefficients.reshape(outputs, features).T.copy())])
    intercepts = np.asarray(ctx.attr("intercepts", []) or [0.0] * outputs, np.float32)
    if intercepts.size != outputs:
        ctx.fail(f"{intercepts.size} intercepts for {outputs} outputs")
    return ctx.emit1("Add", [scores, ctx.const(intercepts.reshape(1, outputs))])


@converter("LinearRegressor", since_version=1, domain=ML)
def linear_regressor(ctx: ConvertContext) -> str:
    transform = post_transform(ctx)
    return transformed(ctx, _linear(ctx, float_rows(ctx), int(ctx.attr("targets", 1))), transform)


@converter("LinearClassifier", since_version=1, domain=ML)
def linear_classifier(ctx: ConvertContext) -> list[str]:
    if ctx.attr("classlabels_strings"):
        ctx.unsupported("string class labels (Kiln's outputs are numeric tensors: export with integer labels)")
    labels = np.asarray(ctx.attr("classlabels_ints", []), np.int64)
    transform = post_transform(ctx)
    intercepts = ctx.attr("intercepts") or []
    coefficients, x = ctx.attr("coefficients", []), float_rows(ctx)
    outputs = len(intercepts) or len(coefficients) // max(1, ctx.builder.type_of(x).shape[1])
    scores = _linear(ctx, x, outputs)
    rows = ctx.builder.type_of(x).shape[0]
    if outputs == 1:  # one score: its sign picks the label, the scores are [1 - s, s] (or of the logistic)
        positive, negative = (labels[1], labels[0]) if labels.size == 2 else (1, 0)
        above = ctx.emit1("Greater", [scores, ctx.const(np.zeros((1, 1), np.float32))])
        label = ctx.emit1("Where", [above, ctx.const(np.asarray(positive, np.int64)),
                                    ctx.const(np.asarray(negative, np.int64))])
        p = ctx.emit1("Sigmoid", [scores]) if transform == "LOGISTIC" else scores
        pair = ctx.emit1("Concat", [ctx.emit1("Sub", [ctx.const(np.ones((1, 1), np.float32)), p]), p], axis=1)
        return [ctx.reshape(label, (rows,)), pair]
    if labels.size != outputs:
        ctx.fail(f"{labels.size} class labels for {outputs} scores")
    best = ctx.emit1("ArgMax", [scores], axis=1, keepdims=0, select_last_index=0)
    return [ctx.emit1("Gather", [ctx.const(labels), best], axis=0), transformed(ctx, scores, transform)]
