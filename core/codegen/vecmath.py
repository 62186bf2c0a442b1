"""Vector math without a libm call per lane: exp/log/sin/cos through glibc's libmvec on x86-64, and
exp/log/tanh/erf as inline float32 polynomials (straight-line LLVM IR, any lane count) elsewhere."""
# libmvec's `_ZGV<isa>N<lanes>v_<fn>` follow the x86-64 vector function ABI (b: SSE, d: AVX2,
# e: AVX-512), take and return whole registers, and are accurate to a few ulp. Only functions
# present since GLIBC_2.22 are used, so artifacts still load on any glibc of the last decade
# (erf/tanh arrived in 2.35). A libm call per lane costs 10-50x a vector instruction sequence and
# keeps LLVM from vectorizing the loop around it, hence the polynomials: exp/log where libmvec is
# absent (AArch64, tails narrower than every variant), tanh/erf everywhere.
from __future__ import annotations

import weakref

from llvmlite import ir

from ..target import Target
from .llvm_types import F32, I32, lanes_of, mangle, scalar_type

FUNCS = ("exp", "log", "sin", "cos")
SYMBOL_PREFIX = "_ZGV"

# module -> {scalar type name: [(lanes, isa letter), ...] widest first}
_WIDTHS: "weakref.WeakKeyDictionary[ir.Module, dict[str, list[tuple[int, str]]]]" = weakref.WeakKeyDictionary()


def enable(module: ir.Module, target: Target) -> None:
    """Let `module` call libmvec when `target` is x86-64 (the variants its features allow)."""
    if target.arch != "x86_64":
        return
    have = {f[1:] for f in target.features.split(",") if f.startswith("+")}
    f32, f64 = [(4, "b")], [(2, "b")]
    if "avx2" in have:
        f32, f64 = [(8, "d")] + f32, [(4, "d")] + f64
    if "avx512f" in have:
        f32, f64 = [(16, "e")] + f32, [(8, "e")] + f64
    _WIDTHS[module] = {"float": f32, "double": f64}


def uses_libmvec(module: ir.Module) -> bool:
    return any(name.startswith(SYMBOL_PREFIX) for name in module.globals)


def math_call(b: ir.IRBuilder, name: str, x: ir.Value) -> ir.Value | None:
    """`name` (exp, log, sin, cos, tanh, erf) on every lane of `x` without per-lane libm calls, or None
    where the caller's llvm intrinsic or libm call is the right choice (float64 tanh/erf, a scalar
    exp/log where libm is at hand, sin/cos without libmvec)."""
    out = vector_call(b, name, x)
    if out is not None:
        return out
    if name in ("exp", "log") and b.module in _WIDTHS and lanes_of(x) == 1:
        return None  # libm's scalar expf/logf: correctly rounded and as fast as the polynomial
    return approximation(b, name, x)


def vector_call(b: ir.IRBuilder, name: str, x: ir.Value) -> ir.Value | None:
    """`name` applied to every lane of vector `x` via libmvec, or None when that is not possible."""
    widths = _WIDTHS.get(b.module)
    if widths is None or name not in FUNCS or not isinstance(x.type, ir.VectorType):
        return None
    elem = x.type.element
    if not isinstance(elem, (ir.FloatType, ir.DoubleType)):
        return None
    suffix, key = ("f", "float") if isinstance(elem, ir.FloatType) else ("", "double")
    lanes, out, start = x.type.count, [], 0
    for width, isa in widths[key]:
        while lanes - start >= width:
            fn = _declare(b.module, f"{SYMBOL_PREFIX}{isa}N{width}v_{name}{suffix}", ir.VectorType(elem, width))
            out.append((start, width, b.call(fn, [_lanes(b, x, start, width)])))
            start += width
    if not out:
        return None
    if start < lanes:  # a tail narrower than every variant
        tail = _lanes(b, x, start, lanes - start)
        values = approximation(b, name, tail) if key == "float" else None
        if values is None:
            intrinsic = _declare(b.module, f"llvm.{name}.{mangle(tail.type)}", tail.type)
            values = b.call(intrinsic, [tail])
        out.append((start, lanes - start, values))
    result: ir.Value = ir.Constant(x.type, ir.Undefined)
    for first, width, values in out:
        for k in range(width):
            result = b.insert_element(result, b.extract_element(values, ir.Constant(I32, k)),
                                      ir.Constant(I32, first + k))
    return result


def _lanes(b: ir.IRBuilder, x: ir.Value, start: int, width: int) -> ir.Value:
    return b.shuffle_vector(x, ir.Constant(x.type, ir.Undefined),
                            ir.Constant(ir.VectorType(I32, width), list(range(start, start + width))))


def _declare(module: ir.Module, name: str, t: ir.Type) -> ir.Function:
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(t, [t]), name)
        fn.attributes.add("nounwind")
        fn.attributes.add("readnone")
    return fn


# ---------------------------------------------------------------- float32 polynomial approximations
# Accuracy over the whole float32 range (tests/core/codegen/test_codegen_vecmath.py): exp and log
# within 1 ulp (Cephes' expf/logf), tanh within 2, erf within 2; inf, NaN, signed zeros, subnormal
# inputs and results as libm has them (results below FLT_MIN are subnormal unless the thread flushes).
# Coefficients: Cephes' for exp/log; tanh's and erf's are least-squares fits (relative error, float64)
# over the intervals stated with them.

_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4  # ln 2 = HI + LO, HI with 9 bits: n * HI is exact
_EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
_LOG_P = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
          -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1)
# tanh(x) = x + x^3 P(x^2) on |x| < 0.625 (below, 1 - 2 / (e^2|x| + 1) loses bits to cancellation)
_TANH_SMALL = 0.625
_TANH_P = (0.002333055716007948, -0.008380278013646603, 0.021780263632535934, -0.053960688412189484,
           0.13333310186862946, -0.3333333432674408)
# erf(x) = x + x P(x^2) on |x| < 1; beyond, 1 - e^-x^2 Q(t) with t = 1 / (1 + x/2) (Q fits erfcx on [1, 4];
# erf is 1 in float32 from 3.9 on, so |x| is clamped to 4)
_ERF_P = (7.971016748342663e-05, -0.0008043363923206925, 0.005191832315176725, -0.026855507865548134,
          0.11283621937036514, -0.3761262893676758, 0.12837916612625122)
_ERF_Q = (0.11931493878364563, -0.47123533487319946, 0.563538134098053, -0.10399802774190903,
          0.34806492924690247, 0.2595925033092499, 0.28493040800094604, -0.0001555509661557153)


def approximation(b: ir.IRBuilder, name: str, x: ir.Value) -> ir.Value | None:
    """exp/log/tanh/erf of float32 or float16 `x` (scalar or vector) as inline IR; None for other
    functions or types (float16 computes in float32 and rounds once)."""
    fn = {"exp": _exp, "log": _log, "tanh": _tanh, "erf": _erf}.get(name)
    st = scalar_type(x.type)
    if fn is None or not isinstance(st, (ir.FloatType, ir.HalfType)):
        return None
    lanes = x.type.count if isinstance(x.type, ir.VectorType) else None  # <1 x float> is a vector too
    if isinstance(st, ir.HalfType):
        return b.fptrunc(fn(_Ops(b, lanes), b.fpext(x, _typed(F32, lanes))), x.type)
    return fn(_Ops(b, lanes), x)


def _typed(scalar: ir.Type, lanes: int | None) -> ir.Type:
    return scalar if lanes is None else ir.VectorType(scalar, lanes)


class _Ops:
    """float32/int32 operations on scalars (`lanes` None) or vectors of `lanes`, constants splat to them."""

    def __init__(self, b: ir.IRBuilder, lanes: int | None):
        self.b, self.lanes = b, lanes
        self.f, self.i = _typed(F32, lanes), _typed(I32, lanes)

    def c(self, value: float) -> ir.Constant:
        return self._splat(ir.Constant(F32, value), self.f)

    def ci(self, value: int) -> ir.Constant:
        return self._splat(ir.Constant(I32, value), self.i)

    def _splat(self, scalar: ir.Constant, t: ir.Type) -> ir.Constant:
        return scalar if self.lanes is None else ir.Constant(t, [scalar] * self.lanes)

    def call(self, intrinsic: str, *args: ir.Value) -> ir.Value:
        t = args[0].type
        fn = self.b.module.globals.get(f"llvm.{intrinsic}.{mangle(t)}")
        if fn is None:
            fn = ir.Function(self.b.module, ir.FunctionType(t, [a.type for a in args]), f"llvm.{intrinsic}.{mangle(t)}")
        return self.b.call(fn, list(args))

    def fma(self, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
        # fmuladd: one FMA where the target has it, a multiply and an add where it has not.
        return self.call("fmuladd", x, y, z)

    def horner(self, x: ir.Value, coefficients) -> ir.Value:
        """The polynomial with `coefficients` (highest power first) at x."""
        acc = self.c(coefficients[0])
        for k in coefficients[1:]:
            acc = self.fma(acc, x, self.c(k))
        return acc

    def lt(self, x: ir.Value, y: ir.Value) -> ir.Value:  # false for NaN
        return self.b.fcmp_ordered("<", x, y)

    def is_nan(self, x: ir.Value) -> ir.Value:
        return self.b.fcmp_unordered("uno", x, x)

    def select(self, cond: ir.Value, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.select(cond, x, y)

    def pow2(self, n: ir.Value) -> ir.Value:
        """2^n for int32 n in [-126, 127], built from its bits."""
        return self.b.bitcast(self.b.shl(self.b.add(n, self.ci(127)), self.ci(23)), self.f)


def _exp(o: _Ops, x: ir.Value) -> ir.Value:
    b = o.b
    # e^x = 2^n e^r, n = round(x / ln 2), |r| <= ln2/2. Clamped so that 2^n fits two normal factors:
    # below -105 the result is 0, above 89 it is inf (beyond 88.72 p * 2^128 overflows by itself).
    nan = o.is_nan(x)
    xc = o.select(o.lt(x, o.c(-105.0)), o.c(-105.0), o.select(o.lt(o.c(89.0), x), o.c(89.0), x))
    xc = o.select(nan, o.c(0.0), xc)  # keeps fptosi defined; NaN is put back at the end
    nf = o.call("rint", b.fmul(xc, o.c(1.4426950408889634)))
    r = o.fma(nf, o.c(-_LN2_HI), xc)
    r = o.fma(nf, o.c(-_LN2_LO), r)
    p = b.fadd(o.fma(o.horner(r, _EXP_P), b.fmul(r, r), r), o.c(1.0))
    n = b.fptosi(nf, o.i)
    half = b.ashr(n, o.ci(1))  # two factors: 2^n alone is not a normal float below 2^-126
    out = b.fmul(b.fmul(p, o.pow2(half)), o.pow2(b.sub(n, half)))
    return o.select(nan, x, out)


def _log(o: _Ops, x: ir.Value) -> ir.Value:
    b = o.b
    # x = m 2^e with m in [sqrt(1/2), sqrt(2)); log x = log1p(m - 1) + e ln 2, Cephes' polynomial.
    tiny = o.lt(x, o.c(1.1754943508222875e-38))  # subnormal (or <= 0, handled below): scale by 2^23
    xs = o.select(tiny, b.fmul(x, o.c(8388608.0)), x)
    bits = b.bitcast(xs, o.i)
    e = b.sub(b.and_(b.lshr(bits, o.ci(23)), o.ci(0xFF)), o.ci(126))
    e = b.sub(e, b.select(tiny, o.ci(23), o.ci(0)))
    m = b.bitcast(b.or_(b.and_(bits, o.ci(0x7FFFFF)), o.ci(0x3F000000)), o.f)  # in [0.5, 1)
    low = o.lt(m, o.c(0.70710678118654752440))
    e = b.sub(e, b.zext(low, o.i))
    m = b.fsub(o.select(low, b.fadd(m, m), m), o.c(1.0))
    ef = b.sitofp(e, o.f)
    z = b.fmul(m, m)
    y = b.fmul(b.fmul(o.horner(m, _LOG_P), m), z)
    y = o.fma(ef, o.c(_LN2_LO), y)
    y = o.fma(z, o.c(-0.5), y)
    out = o.fma(ef, o.c(_LN2_HI), b.fadd(m, y))
    out = o.select(b.fcmp_ordered("==", x, o.c(float("inf"))), x, out)
    out = o.select(b.fcmp_ordered("==", x, o.c(0.0)), o.c(float("-inf")), out)
    return o.select(b.fcmp_unordered("<", x, o.c(0.0)), o.c(float("nan")), out)  # x < 0 or NaN


def _tanh(o: _Ops, x: ir.Value) -> ir.Value:
    b = o.b
    a = o.call("fabs", x)
    x2 = b.fmul(x, x)
    small = o.call("copysign", o.fma(b.fmul(x, x2), o.horner(x2, _TANH_P), x), x)  # -0 stays -0
    e = _exp(o, b.fadd(a, a))  # inf from 44 on: 2 / inf = 0 and tanh is 1
    large = o.call("copysign", b.fsub(o.c(1.0), b.fdiv(o.c(2.0), b.fadd(e, o.c(1.0)))), x)
    return o.select(o.lt(a, o.c(_TANH_SMALL)), small, large)  # NaN takes `large`, which is NaN


def _erf(o: _Ops, x: ir.Value) -> ir.Value:
    b = o.b
    a = o.call("fabs", x)
    x2 = b.fmul(x, x)
    small = o.fma(x, o.horner(x2, _ERF_P), x)
    ac = o.select(o.lt(o.c(4.0), a), o.c(4.0), a)
    t = b.fdiv(o.c(1.0), o.fma(ac, o.c(0.5), o.c(1.0)))
    tail = b.fmul(_exp(o, b.fneg(b.fmul(ac, ac))), o.horner(t, _ERF_Q))
    large = o.call("copysign", b.fsub(o.c(1.0), tail), x)
    return o.select(o.lt(a, o.c(1.0)), small, large)  # NaN takes `large`, which is NaN
