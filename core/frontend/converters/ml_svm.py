"""ai.onnx.ml support vector machines: SVMRegressor and SVMClassifier (one-vs-one or liblinear's linear mode) as a
kernel matrix against the support vectors (MatMul and elementwise ops), then matrices that combine it into the
pairwise decisions and count their votes, as ONNX Runtime does; with prob_a/prob_b, Platt's sigmoid of each decision
coupled into class probabilities (the PairwiseCoupling op)."""
from __future__ import annotations

import numpy as np

from .ml_linear import float_rows
from .ml_trees import ML, post_transform, transformed
from .registry import ConvertContext, converter


def _kernel(ctx: ConvertContext, x: str, vectors: np.ndarray) -> str:
    """K[n, v] = kernel(x[n], vectors[v]) for the node's kernel_type and kernel_params (gamma, coef0, degree)."""
    kind = str(ctx.attr("kernel_type", "LINEAR"))
    gamma, coef0, degree = (list(ctx.attr("kernel_params", [])) + [0.0, 0.0, 0.0])[:3]
    dot = ctx.emit1("MatMul", [x, ctx.const(vectors.T.copy())])
    f32 = np.float32
    if kind == "LINEAR":
        return dot
    if kind == "RBF":  # |x - v|^2 = |x|^2 - 2 x.v + |v|^2, clamped at 0 against rounding
        norms = ctx.emit1("ReduceSum", [ctx.emit1("Mul", [x, x])], axes=(1,), keepdims=1)
        squared = ctx.emit1("Add", [ctx.emit1("Sub", [norms, ctx.emit1("Mul", [dot, ctx.const(f32(2))])]),
                                    ctx.const((vectors * vectors).sum(axis=1).astype(f32).reshape(1, -1))])
        squared = ctx.emit1("Max", [squared, ctx.const(f32(0))])
        return ctx.emit1("Exp", [ctx.emit1("Mul", [squared, ctx.const(f32(-gamma))])])
    scaled = ctx.emit1("Add", [ctx.emit1("Mul", [dot, ctx.const(f32(gamma))]), ctx.const(f32(coef0))])
    if kind == "POLY":
        return ctx.emit1("Pow", [scaled, ctx.const(f32(degree))])
    if kind == "SIGMOID":
        return ctx.emit1("Tanh", [scaled])
    ctx.fail(f"kernel_type {kind!r} must be LINEAR, POLY, RBF or SIGMOID")


def _support_vectors(ctx: ConvertContext, count: int, features: int) -> np.ndarray:
    vectors = np.asarray(ctx.attr("support_vectors", []), np.float32)
    if vectors.size != count * features:
        ctx.fail(f"{vectors.size} support vector values for {count} vectors of {features} features")
    return vectors.reshape(count, features)


@converter("SVMRegressor", since_version=1, domain=ML)
def svm_regressor(ctx: ConvertContext) -> str:
    if int(ctx.attr("one_class", 0)):
        ctx.unsupported("one_class SVMs")
    transform = post_transform(ctx)
    x = float_rows(ctx)
    features = ctx.builder.type_of(x).shape[1]
    count = int(ctx.attr("n_supports", 0))
    coefficients = np.asarray(ctx.attr("coefficients", []), np.float32)
    rho = np.float32((ctx.attr("rho") or [0.0])[0])
    if count == 0:  # linear: the coefficients weigh the features themselves
        kernel, count = x, features
    else:
        kernel = _kernel(ctx, x, _support_vectors(ctx, count, features))
    if coefficients.size != count:
        ctx.fail(f"{coefficients.size} coefficients for {count} support vectors")
    score = ctx.emit1("Add", [ctx.emit1("MatMul", [kernel, ctx.const(coefficients.reshape(count, 1))]),
                              ctx.const(rho)])
    return transformed(ctx, score, transform)


@converter("SVMClassifier", since_version=1, domain=ML)
def svm_classifier(ctx: ConvertContext) -> list[str]:
    if ctx.attr("classlabels_strings"):
        ctx.unsupported("string class labels (Kiln's outputs are numeric tensors: export with integer labels)")
    per_class = [int(v) for v in ctx.attr("vectors_per_class", [])]
    labels = np.asarray(ctx.attr("classlabels_ints", []), np.int64)
    classes = labels.size
    if classes < 2:
        ctx.fail("needs at least two classlabels_ints")
    transform = post_transform(ctx)
    x = float_rows(ctx)
    if not per_class:
        if ctx.attr("prob_a"):
            ctx.unsupported("probability estimates (prob_a/prob_b) in liblinear's mode (no vectors_per_class)")
        return _linear_classifier(ctx, x, labels, transform)
    if len(per_class) != classes:
        ctx.fail(f"vectors_per_class has {len(per_class)} entries for {classes} classes")
    count = sum(per_class)
    kernel = _kernel(ctx, x, _support_vectors(ctx, count, ctx.builder.type_of(x).shape[1]))
    coefficients = np.asarray(ctx.attr("coefficients", []), np.float32)
    if coefficients.size != (classes - 1) * count:
        ctx.fail(f"{coefficients.size} coefficients for {classes - 1} x {count}")
    coefficients = coefficients.reshape(classes - 1, count)
    starts = np.concatenate([[0], np.cumsum(per_class)])
    pairs = [(i, j) for i in range(classes - 1) for j in range(i + 1, classes)]
    rho = np.asarray(ctx.attr("rho", []), np.float32)
    if rho.size != len(pairs):
        ctx.fail(f"{rho.size} rho values for {len(pairs)} class pairs")
    combine = np.zeros((count, len(pairs)), np.float32)  # decision k = K . combine[:, k] + rho[k]
    wins, losses = np.zeros((len(pairs), classes), np.float32), np.zeros((len(pairs), classes), np.float32)
    for k, (i, j) in enumerate(pairs):
        combine[starts[i]:starts[i + 1], k] = coefficients[j - 1, starts[i]:starts[i + 1]]
        combine[starts[j]:starts[j + 1], k] = coefficients[i, starts[j]:starts[j + 1]]
        wins[k, i], losses[k, j] = 1.0, 1.0
    decisions = ctx.emit1("Add", [ctx.emit1("MatMul", [kernel, ctx.const(combine)]), ctx.const(rho.reshape(1, -1))])
    if ctx.attr("prob_a"):  # the label still comes from the votes, as in ONNX Runtime
        label = _binary_label(ctx, decisions, labels) if classes == 2 else _voted_label(ctx, decisions, wins, losses, labels)
        return [label, transformed(ctx, _probabilities(ctx, decisions, pairs, classes), transform)]
    if classes == 2:
        return _two_classes(ctx, decisions, labels, transform)
    return [_voted_label(ctx, decisions, wins, losses, labels), transformed(ctx, decisions, transform)]


def _voted_label(ctx: ConvertContext, decisions: str, wins: np.ndarray, losses: np.ndarray, labels: np.ndarray) -> str:
    positive = ctx.emit1("Cast", [ctx.emit1("Greater", [decisions, ctx.const(np.float32(0))])], to="float32")
    # votes[c] = pairs won by c: a positive decision votes i, any other j
    votes = ctx.emit1("Add", [ctx.emit1("MatMul", [positive, ctx.const(wins - losses)]),
                              ctx.const(losses.sum(axis=0, keepdims=True))])
    best = ctx.emit1("ArgMax", [votes], axis=1, keepdims=0, select_last_index=0)
    return ctx.emit1("Gather", [ctx.const(labels), best], axis=0)


def _probabilities(ctx: ConvertContext, decisions: str, pairs: list[tuple[int, int]], classes: int) -> str:
    """Class probabilities [N, classes]: each pair's decision d through Platt's sigmoid, 1 - logistic(d * A + B)
    clipped to [1e-7, 1 - 1e-7] (ONNX Runtime's arithmetic), placed in r[i, j] and 1 - it in r[j, i], coupled."""
    prob_a, prob_b = (np.asarray(ctx.attr(name, []), np.float32) for name in ("prob_a", "prob_b"))
    if prob_a.size != len(pairs) or prob_b.size != len(pairs):
        ctx.fail(f"prob_a and prob_b need one value per class pair ({len(pairs)}), got {prob_a.size} and {prob_b.size}")
    f32 = np.float32
    value = ctx.emit1("Add", [ctx.emit1("Mul", [decisions, ctx.const(prob_a.reshape(1, -1))]),
                              ctx.const(prob_b.reshape(1, -1))])
    one = ctx.const(f32(1))
    magnitude = ctx.emit1("Div", [one, ctx.emit1("Add", [one, ctx.emit1("Exp", [ctx.emit1("Neg", [ctx.emit1("Abs", [value])])])])])
    logistic = ctx.emit1("Where", [ctx.emit1("Less", [value, ctx.const(f32(0))]), ctx.emit1("Sub", [one, magnitude]), magnitude])
    beats = ctx.emit1("Clip", [ctx.emit1("Sub", [one, logistic])], min=1e-7, max=float(f32(1) - f32(1e-7)))
    forward, backward = np.zeros((len(pairs), classes * classes), f32), np.zeros((len(pairs), classes * classes), f32)
    for k, (i, j) in enumerate(pairs):
        forward[k, i * classes + j] = backward[k, j * classes + i] = 1.0
    # one-hot placements: every product is x * 1 or x * 0, so the sums are exact
    pairwise = ctx.emit1("Add", [ctx.emit1("MatMul", [beats, ctx.const(forward)]),
                                 ctx.emit1("MatMul", [ctx.emit1("Sub", [one, beats]), ctx.const(backward)])])
    rows = ctx.builder.type_of(decisions).shape[0]
    return ctx.emit1("PairwiseCoupling", [ctx.reshape(pairwise, (rows, classes, classes))])


def _two_classes(ctx: ConvertContext, decision: str, labels: np.ndarray, transform: str) -> list[str]:
    """One decision d per row: the first class wins when d > 0; the scores are ONNX Runtime's [-d, d], the
    LOGISTIC of those, or [1 - d, d] untransformed for SOFTMAX (what ONNX Runtime writes)."""
    label = _binary_label(ctx, decision, labels)
    first = ctx.emit1("Sub", [ctx.const(np.ones((1, 1), np.float32)), decision]) if transform == "SOFTMAX" \
        else ctx.emit1("Neg", [decision])
    scores = ctx.emit1("Concat", [first, decision], axis=1)
    return [label, ctx.emit1("Sigmoid", [scores]) if transform == "LOGISTIC" else scores]


def _binary_label(ctx: ConvertContext, decision: str, labels: np.ndarray) -> str:
    wins = ctx.emit1("Greater", [decision, ctx.const(np.float32(0))])
    label = ctx.emit1("Where", [wins, ctx.const(labels[:1]), ctx.const(labels[1:])])
    return ctx.reshape(label, (ctx.builder.type_of(decision).shape[0],))


def _linear_classifier(ctx: ConvertContext, x: str, labels: np.ndarray, transform: str) -> list[str]:
    """liblinear's mode (no vectors_per_class): score[c] = x . coefficients[c] + rho[0]; two classes take the
    second label when the top score passes 0.5 (all coefficients >= 0) or 0 (otherwise), as ONNX Runtime does."""
    classes, features = labels.size, ctx.builder.type_of(x).shape[1]
    coefficients = np.asarray(ctx.attr("coefficients", []), np.float32)
    if coefficients.size != classes * features:
        ctx.fail(f"{coefficients.size} coefficients for {classes} classes x {features} features")
    rho = np.asarray(ctx.attr("rho", []), np.float32)
    if rho.size < 1:
        ctx.fail("rho must hold one value")
    scores = ctx.emit1("Add", [ctx.emit1("MatMul", [x, ctx.const(coefficients.reshape(classes, features).T.copy())]),
                               ctx.const(rho[:1].reshape(1, 1))])
    best = ctx.emit1("ArgMax", [scores], axis=1, keepdims=0, select_last_index=0)
    label = ctx.emit1("Gather", [ctx.const(labels), best], axis=0)
    if classes == 2:
        top = ctx.emit1("ReduceMax", [scores], axes=(1,), keepdims=0)
        cut = 0.5 if bool((coefficients >= 0).all()) else 0.0
        passes = ctx.emit1("GreaterOrEqual" if cut else "Greater", [top, ctx.const(np.float32(cut))])
        label = ctx.emit1("Where", [passes, ctx.const(labels[1:]), label])
    return [label, transformed(ctx, scores, transform)]
