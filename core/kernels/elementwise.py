"""Unary elementwise computes: out[i] = f(x[i]) (activations, math functions, trigonometry, Cast, BitCast,
Clip, IsNaN, IsInf, Not, BitwiseNot)."""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import (Expr, Not, binop, call, cast, const, eq, is_float, logical_or, maximum, minimum, reinterpret,
                        select)
from .common import attr, require, typed_const
from .registry import register_compute

UnaryFn = Callable[[Expr, Mapping[str, Any], str], Expr]  # (x value, attrs, output dtype) -> out value


def _float_only(name: str, fn: Callable[[Expr], Expr]) -> UnaryFn:
    # Integer inputs are computed in float32 and cast back (the importer only sends floats today).
    def body(x: Expr, attrs: Mapping[str, Any], dtype: str) -> Expr:
        return fn(x) if is_float(x.dtype) else cast(dtype, fn(cast("float32", x)))

    body.__name__ = name
    return body


def _sigmoid(x: Expr) -> Expr:
    one = const(1, x.dtype)
    return one / (one + call("exp", -x))


# erf(x) ~= x * P(x^2) / Q(x^2) on [-4, 4] (|error| < 5e-7; erf is +-1 in float32 beyond): the
# rational approximation Eigen and XLA use. Plain arithmetic vectorizes, unlike a libm call per lane.
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02)


def _horner(x2: Expr, coefficients: Sequence[float]) -> Expr:
    """The polynomial with `coefficients` (highest power first) at x2."""
    acc = const(coefficients[0], x2.dtype)
    for c in coefficients[1:]:
        acc = acc * x2 + const(c, x2.dtype)
    return acc


def _in_float32(fn: Callable[[Expr], Expr], libm: str) -> Callable[[Expr], Expr]:
    # The approximations are float32's: float16/bfloat16 compute through float32 (their own arithmetic
    # would round every step); float64 keeps the libm call, which has its precision.
    def body(x: Expr) -> Expr:
        if x.dtype == "float32":
            return fn(x)
        if x.dtype == "float64":
            return call(libm, x)
        return cast(x.dtype, fn(cast("float32", x)))

    return body


def _erf(x: Expr) -> Expr:
    x = minimum(maximum(x, const(-4.0, x.dtype)), const(4.0, x.dtype))
    x2 = x * x
    return x * _horner(x2, _ERF_P) / _horner(x2, _ERF_Q)


# tanh(x) ~= x * P(x^2) / Q(x^2) on [-7.905, 7.905] (relative error < 5e-7; tanh is +-1 in float32
# beyond), tanh(x) = x below 4e-4: Eigen's and XLA's float tanh, vectorizable like erf above.
_TANH_CLAMP = 7.90531110763549805
_TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
           1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)
_TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)


def _tanh(x: Expr) -> Expr:
    clamped = minimum(maximum(x, const(-_TANH_CLAMP, x.dtype)), const(_TANH_CLAMP, x.dtype))
    x2 = clamped * clamped
    ratio = clamped * _horner(x2, _TANH_P) / _horner(x2, _TANH_Q)
    return select(call("abs", x) < const(4e-4, x.dtype), x, ratio)


def _clip(x: Expr, attrs: Mapping[str, Any], dtype: str) -> Expr:
    lo, hi = attrs.get("min"), attrs.get("max")
    if lo is not None:
        x = maximum(x, typed_const(lo, x.dtype))
    if hi is not None:
        x = minimum(x, typed_const(hi, x.dtype))
    return x


def _leaky_relu(x: Expr, attrs: Mapping[str, Any], dtype: str) -> Expr:
    alpha = float(attr(attrs, "alpha", "LeakyRelu", 0.01))
    return select(x < const(0, x.dtype), x * const(alpha, x.dtype), x)


def _sign(x: Expr, attrs: Mapping[str, Any], dtype: str) -> Expr:
    # x itself where it is neither positive nor negative: keeps 0 and NaN as numpy's sign does.
    return select(x > const(0, x.dtype), const(1, x.dtype), select(x < const(0, x.dtype), const(-1, x.dtype), x))


def _isinf(x: Expr, attrs: Mapping[str, Any], dtype: str) -> Expr:
    checks = [eq(x, const(float(sign) * float("inf"), x.dtype))
              for sign, key in ((1, "detect_positive"), (-1, "detect_negative")) if attr(attrs, key, "IsInf", True)]
    if not checks:
        return const(0, "bool")
    return checks[0] if len(checks) == 1 else logical_or(checks[0], checks[1])


def _bitwise_not(x: Expr, attrs: Mapping[str, Any], dtype: str) -> Expr:
    return binop("bitxor", x, const(-1, x.dtype))  # -1 is all ones in every integer width


# TIR math calls: sin/cos vectorize through libmvec, the others are a libm call per lane (rare in models).
_MATH_CALLS = ("sin", "cos", "asin", "acos", "atan", "sinh", "asinh", "acosh", "atanh")


def _tan(x: Expr) -> Expr:
    # sin/cos vectorize (libmvec) and are each within a few ulp relative, so their ratio is too, even
    # near the poles where cos is small; a libm tan would be one call per lane.
    return call("sin", x) / call("cos", x)


def _cosh(x: Expr) -> Expr:
    # (e^|x| + e^-|x|) / 2 as (t/2)*t + (1/2t)/t with t = e^(|x|/2): finite wherever cosh is (e^|x|
    # itself overflows from 88.7 on), and free of selects, so the loop vectorizes (exp through libmvec).
    t = call("exp", call("abs", x) * const(0.5, x.dtype))
    half = const(0.5, x.dtype)
    return half * t * t + half / t / t


UNARY: dict[str, UnaryFn] = {
    "Relu": lambda x, a, dt: maximum(x, const(0, x.dtype)),
    "Sigmoid": _float_only("Sigmoid", _sigmoid),
    "Tanh": _float_only("Tanh", _in_float32(_tanh, "tanh")),
    "Erf": _float_only("Erf", _in_float32(_erf, "erf")),
    "Sqrt": _float_only("Sqrt", lambda x: call("sqrt", x)),
    "Exp": _float_only("Exp", lambda x: call("exp", x)),
    "Log": _float_only("Log", lambda x: call("log", x)),
    "Neg": lambda x, a, dt: -x,
    "Abs": lambda x, a, dt: call("abs", x),
    "Reciprocal": _float_only("Reciprocal", lambda x: const(1, x.dtype) / x),
    "Floor": lambda x, a, dt: call("floor", x),
    "Ceil": lambda x, a, dt: call("ceil", x),
    "Not": lambda x, a, dt: Not(cast("bool", x)),
    "IsNaN": lambda x, a, dt: call("isnan", x),
    "Identity": lambda x, a, dt: x,
    "Cast": lambda x, a, dt: cast(dt, x),
    "Clip": _clip,
    "LeakyRelu": _leaky_relu,
    "Round": lambda x, a, dt: call("round", x),  # TIR round is half to even, as ONNX wants
    "Sign": _sign,
    "IsInf": _isinf,
    "BitwiseNot": _bitwise_not,
    "BitCast": lambda x, a, dt: reinterpret(str(attr(a, "to", "BitCast")), x),
    **{name.capitalize(): _float_only(name.capitalize(), lambda x, name=name: call(name, x)) for name in _MATH_CALLS},
    "Tan": _float_only("Tan", _in_float32(_tan, "tan")),
    "Cosh": _float_only("Cosh", _in_float32(_cosh, "cosh")),
}


def unary(op: str, x: te.Tensor, attrs: Mapping[str, Any], out_dtype: Optional[str] = None) -> te.Tensor:
    """The compute of unary `op` applied to `x` (usable by other computes, e.g. fused epilogues)."""
    fn = UNARY[op]
    if out_dtype is None:
        out_dtype = str(attrs.get("to")) if op in ("Cast", "BitCast") else fn(x(*([0] * x.ndim)), attrs, x.dtype).dtype
    return te.compute(x.shape, lambda *i: cast(out_dtype, fn(x(*i), attrs, out_dtype)), name=op.lower(),
                      tag="elemwise")


def _register(op: str) -> None:
    @register_compute(op)
    def compute(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
        (x,) = require(inputs, 1, op)
        return [unary(op, x, attrs, out_types[0].dtype if out_types else None)]


for _op in UNARY:
    _register(_op)
