"""Activation ONNX ops that decompose into IR elementwise ops: ThresholdedRelu, Softplus, Softsign, Selu, Celu,
Shrink, Mish, Swish, SwiGLU and ai.onnx.ml Binarizer (the fusion pass merges each chain back into one kernel)."""
from __future__ import annotations

from .registry import ConvertContext, converter


def softplus_of(ctx: ConvertContext, x: str) -> str:
    # log(1 + e^x) = max(x, 0) + log(1 + e^-|x|): never overflows, unlike the textbook form.
    tail = ctx.emit1("Exp", [ctx.emit1("Neg", [ctx.emit1("Abs", [x])])])
    log1p = ctx.emit1("Log", [ctx.emit1("Add", [tail, ctx.scalar_like(1, x)])])
    return ctx.emit1("Add", [ctx.emit1("Max", [x, ctx.scalar_like(0, x)]), log1p])


def exponential_linear(ctx: ConvertContext, x: str, alpha: float, scale: float = 1.0) -> str:
    """x for x >= 0, alpha * (e^(x / scale) - 1) below (Elu, Selu, Celu) as max(x, 0) + alpha * (e^(min(x, 0)
    / scale) - 1): no select, so the fused loop vectorizes with its exp (a select on x would keep it scalar)."""
    negative_part = ctx.emit1("Min", [x, ctx.scalar_like(0, x)])
    if scale != 1.0:
        negative_part = ctx.emit1("Div", [negative_part, ctx.scalar_like(scale, x)])
    expm1 = ctx.emit1("Sub", [ctx.emit1("Exp", [negative_part]), ctx.scalar_like(1, x)])
    return ctx.emit1("Add", [ctx.emit1("Max", [x, ctx.scalar_like(0, x)]),
                             ctx.emit1("Mul", [expm1, ctx.scalar_like(alpha, x)])])


def thresholded_relu_of(ctx: ConvertContext, x: str, alpha: float) -> str:
    above = ctx.emit1("Greater", [x, ctx.scalar_like(alpha, x)])
    return ctx.emit1("Where", [above, x, ctx.scalar_like(0, x)])


def softsign_of(ctx: ConvertContext, x: str) -> str:
    return ctx.emit1("Div", [x, ctx.emit1("Add", [ctx.emit1("Abs", [x]), ctx.scalar_like(1, x)])])


@converter("ThresholdedRelu", since_version=10)
def thresholded_relu(ctx: ConvertContext) -> str:
    return thresholded_relu_of(ctx, ctx.input(0), float(ctx.attr("alpha", 1.0)))


@converter("Softplus", since_version=1)
def softplus(ctx: ConvertContext) -> str:
    return softplus_of(ctx, ctx.input(0))


@converter("Softsign", since_version=1)
def softsign(ctx: ConvertContext) -> str:
    return softsign_of(ctx, ctx.input(0))


@converter("Selu", since_version=6)
def selu(ctx: ConvertContext) -> str:
    x = ctx.input(0)
    alpha = float(ctx.attr("alpha", 1.67326319217681884765625))
    gamma = float(ctx.attr("gamma", 1.05070102214813232421875))
    return ctx.emit1("Mul", [exponential_linear(ctx, x, alpha), ctx.scalar_like(gamma, x)])


@converter("Celu", since_version=12)
def celu(ctx: ConvertContext) -> str:
    alpha = float(ctx.attr("alpha", 1.0))
    return exponential_linear(ctx, ctx.input(0), alpha, scale=alpha)


@converter("Shrink", since_version=9)
def shrink(ctx: ConvertContext) -> str:
    x = ctx.input(0)
    bias, lambd = float(ctx.attr("bias", 0.0)), float(ctx.attr("lambd", 0.5))
    below = ctx.emit1("Less", [x, ctx.scalar_like(-lambd, x)])
    above = ctx.emit1("Greater", [x, ctx.scalar_like(lambd, x)])
    shifted_up = ctx.emit1("Add", [x, ctx.scalar_like(bias, x)])
    shifted_down = ctx.emit1("Sub", [x, ctx.scalar_like(bias, x)])
    return ctx.emit1("Where", [below, shifted_up, ctx.emit1("Where", [above, shifted_down, ctx.scalar_like(0, x)])])


@converter("Mish", since_version=18)
def mish(ctx: ConvertContext) -> str:
    x = ctx.input(0)
    return ctx.emit1("Mul", [x, ctx.emit1("Tanh", [softplus_of(ctx, x)])])


def _swish(ctx: ConvertContext, x: str, alpha: float) -> str:
    """x * sigmoid(alpha * x)."""
    return ctx.emit1("Mul", [x, ctx.emit1("Sigmoid", [ctx.emit1("Mul", [x, ctx.scalar_like(alpha, x)])])])


@converter("Swish", since_version=24)
def swish(ctx: ConvertContext) -> str:
    return _swish(ctx, ctx.input(0), float(ctx.attr("alpha", 1.0)))


@converter("SwiGLU", since_version=28)
def swiglu(ctx: ConvertContext) -> str:
    gate, value = ctx.input(0), ctx.input(1)
    if ctx.shape(0) != ctx.shape(1):
        ctx.fail(f"A {list(ctx.shape(0))} and B {list(ctx.shape(1))} must have the same shape (no broadcasting)")
    return ctx.emit1("Mul", [_swish(ctx, gate, float(ctx.attr("alpha", 1.0))), value])


@converter("Binarizer", since_version=1, domain="ai.onnx.ml")
def binarizer(ctx: ConvertContext) -> str:
    x = ctx.input(0)
    above = ctx.emit1("Greater", [x, ctx.scalar_like(float(ctx.attr("threshold", 0.0)), x)])
    return ctx.emit1("Where", [above, ctx.scalar_like(1, x), ctx.scalar_like(0, x)])
