"""Unary ONNX ops: direct IR ops (math, trigonometry, Round, Sign, BitwiseNot), Cast/CastLike/BitCast, IsInf,
Clip, Identity/Dropout and small activations
(PRelu, HardSigmoid, HardSwish, Elu, Gelu) decomposed into IR elementwise ops."""
from __future__ import annotations

import math

import numpy as np

from ..onnx_values import numpy_dtype
from .quantize import cast_value
from .activations import exponential_linear
from .registry import ConvertContext, converter

_DIRECT = {"Relu": 6, "Sigmoid": 6, "Tanh": 6, "Sqrt": 6, "Exp": 6, "Log": 6, "Neg": 6, "Abs": 6,
           "Reciprocal": 6, "Floor": 6, "Ceil": 6, "Not": 1, "Erf": 9, "IsNaN": 9, "Round": 11, "Sign": 9,
           "Sin": 7, "Cos": 7, "Tan": 7, "Asin": 7, "Acos": 7, "Atan": 7, "Sinh": 9, "Cosh": 9, "Asinh": 9,
           "Acosh": 9, "Atanh": 9, "BitwiseNot": 18}


def _direct(op: str):
    def convert(ctx: ConvertContext) -> str:
        return ctx.emit1(op, [ctx.input(0)])

    return convert


for _op, _since in _DIRECT.items():
    converter(_op, since_version=_since)(_direct(_op))


@converter("Identity", since_version=1)
def identity(ctx: ConvertContext) -> str:
    return ctx.input(0)


@converter("Dropout", since_version=1)
def dropout(ctx: ConvertContext) -> list[str]:
    # Inference semantics: the identity with an all-true mask. Training mode is exact only with ratio 0;
    # a real drop draws a random mask, and Kiln has no random generator to match anyone's.
    if ctx.opset >= 12 and ctx.has_input(2) and bool(ctx.constant(2, "training_mode")):
        ratio = ctx.optional_constant(1, "ratio")
        if ratio is None or float(np.asarray(ratio).reshape(())) != 0.0:
            ctx.unsupported("Dropout in training mode with ratio > 0 (a random mask)")
    if ctx.opset < 7 and ctx.attr("is_test", 0) == 0:
        ctx.unsupported("Dropout with is_test=0")
    if not ctx.output_used(1):
        return [ctx.input(0)]
    mask_dtype = "bool" if ctx.opset >= 10 else ctx.type_of(0).dtype  # the mask had type T before opset 10
    keep_all = ctx.emit1("Expand", [ctx.const(np.ones((), mask_dtype))], shape=ctx.shape(0))
    return [ctx.input(0), keep_all]


def _cast_to(ctx: ConvertContext, dtype: str) -> str:
    # saturate (float8 targets) and round_mode (e8m0) are ONNX Cast/CastLike attributes since opset 19/25.
    return cast_value(ctx, ctx.input(0), dtype, saturate=bool(ctx.attr("saturate", 1)),
                      round_mode=str(ctx.attr("round_mode", "up")))


@converter("Cast", since_version=6)
def cast(ctx: ConvertContext) -> str:
    return _cast_to(ctx, numpy_dtype(ctx.attr("to"), ctx.where))


@converter("BitCast", since_version=26)
def bit_cast(ctx: ConvertContext) -> str:
    return ctx.emit1("BitCast", [ctx.input(0)], to=numpy_dtype(ctx.attr("to"), ctx.where))


@converter("IsInf", since_version=10)
def is_inf(ctx: ConvertContext) -> str:
    return ctx.emit1("IsInf", [ctx.input(0)], detect_positive=bool(ctx.attr("detect_positive", 1)),
                     detect_negative=bool(ctx.attr("detect_negative", 1)))


@converter("CastLike", since_version=15)
def cast_like(ctx: ConvertContext) -> str:
    return _cast_to(ctx, ctx.type_of(1).dtype)


# ONNX Clip before opset 11 defaults its bounds to the float range, which means "no bound".
_FLOAT_LIMIT = float(np.finfo(np.float32).max)


def _bound(value) -> float | None:
    if value is None:
        return None
    value = float(np.asarray(value).reshape(()))
    return None if abs(value) >= _FLOAT_LIMIT else value


@converter("Clip", since_version=6)
def clip_attrs(ctx: ConvertContext) -> str:
    return ctx.emit1("Clip", [ctx.input(0)], min=_bound(ctx.attr("min")), max=_bound(ctx.attr("max")))


@converter("Clip", since_version=11)
def clip_inputs(ctx: ConvertContext) -> str:
    low = ctx.optional_constant(1, "min")
    high = ctx.optional_constant(2, "max")
    if ctx.type_of(0).dtype.startswith(("int", "uint")):
        # Integer bounds are exact numbers: no "float range means unbounded" convention applies.
        low = None if low is None else float(np.asarray(low).reshape(()))
        high = None if high is None else float(np.asarray(high).reshape(()))
        return ctx.emit1("Clip", [ctx.input(0)], min=low, max=high)
    return ctx.emit1("Clip", [ctx.input(0)], min=_bound(low), max=_bound(high))


@converter("LeakyRelu", since_version=6)
def leaky_relu(ctx: ConvertContext) -> str:
    return ctx.emit1("LeakyRelu", [ctx.input(0)], alpha=float(ctx.attr("alpha", 0.01)))


@converter("PRelu", since_version=7)
def prelu(ctx: ConvertContext) -> str:
    x, slope = ctx.input(0), ctx.input(1)
    negative = ctx.emit1("Less", [x, ctx.scalar_like(0, x)])
    return ctx.emit1("Where", [negative, ctx.emit1("Mul", [x, slope]), x])


def hard_sigmoid_of(ctx: ConvertContext, x: str, alpha: float, beta: float) -> str:
    scaled = ctx.emit1("Add", [ctx.emit1("Mul", [x, ctx.scalar_like(alpha, x)]), ctx.scalar_like(beta, x)])
    return ctx.emit1("Clip", [scaled], min=0.0, max=1.0)


@converter("HardSigmoid", since_version=6)
def hard_sigmoid(ctx: ConvertContext) -> str:
    return hard_sigmoid_of(ctx, ctx.input(0), float(ctx.attr("alpha", 0.2)), float(ctx.attr("beta", 0.5)))


@converter("HardSwish", since_version=14)
def hard_swish(ctx: ConvertContext) -> str:
    x = ctx.input(0)
    return ctx.emit1("Mul", [x, hard_sigmoid_of(ctx, x, 1.0 / 6.0, 0.5)])


@converter("Elu", since_version=6)
def elu(ctx: ConvertContext) -> str:
    return exponential_linear(ctx, ctx.input(0), float(ctx.attr("alpha", 1.0)))


@converter("Gelu", since_version=20)
def gelu(ctx: ConvertContext) -> str:
    return gelu_of(ctx, ctx.input(0), tanh=ctx.attr("approximate", "none") == "tanh")


def gelu_of(ctx: ConvertContext, x: str, tanh: bool) -> str:
    """GELU of `x`: exact (erf) or the tanh approximation."""
    if tanh:
        cube = ctx.emit1("Mul", [ctx.emit1("Mul", [x, x]), x])
        inner = ctx.emit1("Add", [x, ctx.emit1("Mul", [cube, ctx.scalar_like(0.044715, x)])])
        core = ctx.emit1("Tanh", [ctx.emit1("Mul", [inner, ctx.scalar_like(math.sqrt(2 / math.pi), x)])])
    else:
        core = ctx.emit1("Erf", [ctx.emit1("Mul", [x, ctx.scalar_like(1 / math.sqrt(2), x)])])
    half_x = ctx.emit1("Mul", [x, ctx.scalar_like(0.5, x)])
    return ctx.emit1("Mul", [half_x, ctx.emit1("Add", [core, ctx.scalar_like(1, x)])])


