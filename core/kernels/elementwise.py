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
    # Inline polynomials in codegen (codegen/vecmath.py), vector code at every width, within 2 ulp.
    "Tanh": _float_only("Tanh", lambda x: call("tanh", x)),
    "Erf": _float_only("Erf", lambda x: call("erf", x)),
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
