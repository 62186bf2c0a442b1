"""Math functions for NVPTX, which has no libm: exp, log, pow, trig... built from the PTX
approximations (ex2/lg2/sin/cos.approx, about 2^-22 relative) with range reduction; tanh and erf
are the CPU's polynomials (vecmath.py)."""
# Accuracy target: float32 results within a few 1e-7 relative (absolute near zero), as CUDA's fast
# intrinsics (__expf, __logf) give; models are validated against ONNX Runtime at 1e-4. float16 goes
# through float32; float64 would need double-precision polynomials, which no model here needs yet.
from __future__ import annotations

import math
from typing import Callable

from llvmlite import ir

from ..errors import CodegenError
from . import vecmath
from .llvm_types import F32, scalar_type

_UNARY: dict[str, Callable[[ir.IRBuilder, ir.Value], ir.Value]] = {}


def _unary(name: str):
    def wrap(fn):
        _UNARY[name] = fn
        return fn

    return wrap


def is_nvptx(module: ir.Module) -> bool:
    return str(module.triple).startswith("nvptx")


def _nvvm(b: ir.IRBuilder, name: str, *args: ir.Value) -> ir.Value:
    fn = b.module.globals.get(name)
    if fn is None:
        fn = ir.Function(b.module, ir.FunctionType(F32, [F32] * len(args)), name)
    return b.call(fn, list(args))


def _llvm(b: ir.IRBuilder, name: str, *args: ir.Value) -> ir.Value:
    return _nvvm(b, f"llvm.{name}.f32", *args)


def _c(v: float) -> ir.Constant:
    return ir.Constant(F32, v)


def _fma(b: ir.IRBuilder, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
    return _llvm(b, "fma", x, y, z)


def _poly(b: ir.IRBuilder, x: ir.Value, coeffs: list[float]) -> ir.Value:
    """coeffs[0] + coeffs[1] x + ... by Horner's rule with FMAs."""
    acc = _c(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = _fma(b, acc, x, _c(c))
    return acc


def _exp2(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return _nvvm(b, "llvm.nvvm.ex2.approx.f", x)


@_unary("exp")
def _exp(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    # x = n ln2 + r with |r| <= ln2/2 (Cody-Waite, two-part ln2): ex2.approx is exact on integers,
    # so the rounding of x*log2(e) (large for large |x|) no longer costs relative accuracy.
    # Clamped first (NaN passes: ordered compares are false): beyond, e^x is 0 or inf anyway, and
    # -FLT_MAX (attention masks) would make n infinite and the result inf * 0 = NaN.
    x = b.select(b.fcmp_ordered("<", x, _c(-104.0)), _c(-104.0), x)
    x = b.select(b.fcmp_ordered(">", x, _c(89.0)), _c(89.0), x)
    n = _llvm(b, "rint", b.fmul(x, _c(1.0 / math.log(2.0))))
    r = _fma(b, n, _c(-0.693145751953125), x)
    r = _fma(b, n, _c(-1.428606765330187e-06), r)
    return b.fmul(_exp2(b, b.fmul(r, _c(1.0 / math.log(2.0)))), _exp2(b, n))


@_unary("log")
def _log(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return b.fmul(_nvvm(b, "llvm.nvvm.lg2.approx.f", x), _c(math.log(2.0)))


def _sqrt(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return _llvm(b, "sqrt", x)


def _reduce_2pi(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    # sin/cos.approx are accurate on [-pi, pi] only: subtract whole turns first (two-part 2*pi).
    k = _llvm(b, "rint", b.fmul(x, _c(1.0 / (2.0 * math.pi))))
    r = _fma(b, k, _c(-6.28125), x)
    return _fma(b, k, _c(-1.9353071795864769e-3), r)


@_unary("sin")
def _sin(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return _nvvm(b, "llvm.nvvm.sin.approx.f", _reduce_2pi(b, x))


@_unary("cos")
def _cos(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return _nvvm(b, "llvm.nvvm.cos.approx.f", _reduce_2pi(b, x))


@_unary("tan")
def _tan(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    r = _reduce_2pi(b, x)
    return b.fdiv(_nvvm(b, "llvm.nvvm.sin.approx.f", r), _nvvm(b, "llvm.nvvm.cos.approx.f", r))


def _copysign(b: ir.IRBuilder, magnitude: ir.Value, sign: ir.Value) -> ir.Value:
    return _llvm(b, "copysign", magnitude, sign)


@_unary("tanh")
def _tanh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    # The CPU's float32 polynomial (within 2 ulp, codegen/vecmath.py): plain arithmetic, valid PTX too.
    return vecmath.approximation(b, "tanh", x)


@_unary("erf")
def _erf(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return vecmath.approximation(b, "erf", x)


@_unary("atan")
def _atan(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    # Reduce |x| > 1 by atan(x) = pi/2 - atan(1/x), then a minimax polynomial on [0, 1] (error ~1e-7).
    a = _llvm(b, "fabs", x)
    inv = b.fcmp_ordered(">", a, _c(1.0))
    z = b.select(inv, b.fdiv(_c(1.0), a), a)
    z2 = b.fmul(z, z)
    p = b.fmul(z, _poly(b, z2, [0.99999934, -0.33329856, 0.19946536, -0.13908534, 0.09642004,
                                -0.05590988, 0.02186123, -0.00405404]))
    r = b.select(inv, b.fsub(_c(math.pi / 2), p), p)
    return _copysign(b, r, x)


@_unary("asin")
def _asin(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return _atan(b, b.fdiv(x, _sqrt(b, b.fmul(b.fsub(_c(1.0), x), b.fadd(_c(1.0), x)))))


@_unary("acos")
def _acos(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return b.fsub(_c(math.pi / 2), _asin(b, x))


@_unary("sinh")
def _sinh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    e = _exp(b, x)
    return b.fmul(b.fsub(e, b.fdiv(_c(1.0), e)), _c(0.5))


@_unary("cosh")
def _cosh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    e = _exp(b, x)
    return b.fmul(b.fadd(e, b.fdiv(_c(1.0), e)), _c(0.5))


@_unary("asinh")
def _asinh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    a = _llvm(b, "fabs", x)
    return _copysign(b, _log(b, b.fadd(a, _sqrt(b, _fma(b, a, a, _c(1.0))))), x)


@_unary("acosh")
def _acosh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return _log(b, b.fadd(x, _sqrt(b, _fma(b, x, x, _c(-1.0)))))


@_unary("atanh")
def _atanh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return b.fmul(_log(b, b.fdiv(b.fadd(_c(1.0), x), b.fsub(_c(1.0), x))), _c(0.5))


def pow_f32(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """x ** y as C's powf: 2^(y log2|x|), negative x only to integer powers (odd ones keep the sign)."""
    mag = _exp2(b, b.fmul(y, _nvvm(b, "llvm.nvvm.lg2.approx.f", _llvm(b, "fabs", x))))
    integral = b.fcmp_ordered("==", _llvm(b, "trunc", y), y)
    odd = b.fcmp_ordered("!=", _llvm(b, "trunc", b.fmul(y, _c(0.5))), b.fmul(y, _c(0.5)))
    negative = b.fcmp_ordered("<", x, _c(0.0))
    signed = b.select(b.and_(integral, odd), b.fneg(mag), mag)
    out = b.select(negative, b.select(integral, signed, _c(float("nan"))), mag)
    return b.select(b.fcmp_ordered("==", y, _c(0.0)), _c(1.0), out)


def _through_f32(b: ir.IRBuilder, x: ir.Value, fn: Callable[..., ir.Value], *more: ir.Value) -> ir.Value:
    st = scalar_type(x.type)
    if isinstance(st, ir.FloatType):
        return fn(b, x, *more)
    if isinstance(st, ir.HalfType):
        return b.fptrunc(fn(b, b.fpext(x, F32), *(b.fpext(m, F32) for m in more)), st)
    raise CodegenError(f"the cuda target computes {getattr(fn, '__name__', 'math').lstrip('_')} in float32 and "
                       f"float16 only, not {st}")


def intrinsic(b: ir.IRBuilder, name: str, x: ir.Value) -> ir.Value | None:
    """`name` (a TIR intrinsic) of scalar float `x` on NVPTX, or None when LLVM's own lowering serves."""
    fn = _UNARY.get(name)
    if fn is None:  # sqrt, floor, fabs...: the NVPTX backend has instructions for them
        return None
    if isinstance(x.type, ir.VectorType):
        raise CodegenError("the cuda target has no vector math; GPU schedules do not vectorize")
    return _through_f32(b, x, fn)


def power(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return _through_f32(b, x, pow_f32, y)


__all__ = ["intrinsic", "power", "is_nvptx"]
