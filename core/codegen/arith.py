"""Arithmetic, comparisons, casts and math intrinsics on LLVM values, scalar or vector alike,
with numpy's semantics (floor div/mod, NaN-propagating min/max, round-half-even, truncating casts)."""
from __future__ import annotations

from llvmlite import ir

from ..errors import CodegenError
from . import gpu_math, vecmath
from ..narrow_dtypes import SUBBYTE_INTS
from .narrow import bf16_from_bits, bf16_to_bits, from_mem, round_value, to_mem, wrap_subbyte
from .llvm_types import (F32, F64, I1, I32, I64, const, int_bits, is_bool, is_float, is_signed, itemsize, lanes_of,
                         mangle, mem_type, reg_type, scalar_type, splat_const, with_lanes)


def declare(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    """Get the function `name` in `module`, declaring it on first use."""
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name)
    return fn


def splat(b: ir.IRBuilder, value: ir.Value, lanes: int) -> ir.Value:
    """Broadcast a scalar to `lanes` lanes (insertelement + shufflevector, which LLVM turns into vbroadcast)."""
    if lanes <= 1 or isinstance(value.type, ir.VectorType):
        return value
    if isinstance(value, ir.Constant):
        return splat_const(value, lanes)
    vt = ir.VectorType(value.type, lanes)
    one = b.insert_element(ir.Constant(vt, ir.Undefined), value, ir.Constant(I32, 0))
    return b.shuffle_vector(one, ir.Constant(vt, ir.Undefined), ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))


def unify(b: ir.IRBuilder, *values: ir.Value) -> list[ir.Value]:
    """Splat scalars so that every value has the same number of lanes."""
    lanes = max(lanes_of(v) for v in values)
    return [splat(b, v, lanes) for v in values]


def per_lane(b: ir.IRBuilder, fn, ret: ir.Type, *values: ir.Value) -> ir.Value:
    """Apply a scalar emitter `fn(*scalars)` to each lane; for operations with no vector form."""
    lanes = max(lanes_of(v) for v in values)
    if lanes == 1:
        return fn(*values)
    out: ir.Value = ir.Constant(ir.VectorType(ret, lanes), ir.Undefined)
    for i in range(lanes):
        idx = ir.Constant(I32, i)
        out = b.insert_element(out, fn(*(b.extract_element(v, idx) for v in values)), idx)
    return out


def to_bool(b: ir.IRBuilder, dtype: str, v: ir.Value) -> ir.Value:
    """Truth value as i1 (numpy's bool(): nonzero, NaN counts as true)."""
    if is_bool(dtype):
        return v
    zero = ir.Constant(v.type, None)
    return b.fcmp_unordered("!=", v, zero) if is_float(dtype) else b.icmp_unsigned("!=", v, zero)


# ---------------------------------------------------------------- narrow dtypes (codegen/narrow.py)

def bf16_round(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """Round a float to the nearest bfloat16 value (kept as float): what each bfloat16 op does."""
    return bf16_from_bits(b, bf16_to_bits(b, v))


def _ic(t: ir.Type, value: int) -> ir.Constant:
    return splat_const(ir.Constant(t.element, value), t.count) if isinstance(t, ir.VectorType) else ir.Constant(t, value)


def _const_like(v: ir.Value, dtype: str, value) -> ir.Value:
    return const(dtype, value, lanes_of(v))


# ---------------------------------------------------------------- binary operations

_FCMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def binop(b: ir.IRBuilder, op: str, dtype: str, x: ir.Value, y: ir.Value, y_const: int | None = None) -> ir.Value:
    """`x op y` where both operands have `dtype`; `y_const` is y's value when it is an integer constant."""
    x, y = unify(b, x, y)
    if op in ("and", "or"):
        return b.and_(x, y) if op == "and" else b.or_(x, y)
    if op in _FCMP:
        if is_float(dtype):
            # numpy: every comparison with NaN is false except !=.
            return b.fcmp_unordered("!=", x, y) if op == "ne" else b.fcmp_ordered(_FCMP[op], x, y)
        cmp = b.icmp_signed if is_signed(dtype) else b.icmp_unsigned
        return cmp(_FCMP[op], x, y)
    if op in _BITWISE:
        return _bitwise(b, op, dtype, x, y)
    if is_bool(dtype):
        return _bool_arith(b, op, x, y)
    out = _float_binop(b, op, dtype, x, y) if is_float(dtype) else _int_binop(b, op, dtype, x, y, y_const)
    return round_value(b, dtype, out)  # bfloat16/float8 round, int4/int2 wrap, others as they are


_BITWISE = ("bitand", "bitor", "bitxor", "shl", "shr")


def _bitwise(b: ir.IRBuilder, op: str, dtype: str, x: ir.Value, y: ir.Value) -> ir.Value:
    # Shifts by >= the bit width are poison in LLVM; TIR requires 0 <= shift < width (kernels clamp).
    if is_float(dtype):
        raise CodegenError(f"bit operation {op!r} is not defined on {dtype}")
    if op == "bitand":
        return b.and_(x, y)
    if op == "bitor":
        return b.or_(x, y)
    if op == "bitxor":
        return b.xor(x, y)
    if op == "shl":
        return b.shl(x, y)
    return b.ashr(x, y) if is_signed(dtype) else b.lshr(x, y)


def _bool_arith(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value) -> ir.Value:
    # numpy on bools: + is or, * is and, max/min are or/and.
    if op in ("add", "max", "or"):
        return b.or_(x, y)
    if op in ("mul", "min", "and"):
        return b.and_(x, y)
    if op == "sub":
        return b.xor(x, y)
    raise CodegenError(f"operation {op!r} is not defined on bool")


# `contract` lets LLVM fuse a*b+c into one FMA (as TVM does); results stay within numpy's tolerance
# and are, if anything, more accurate. Nothing else of fast-math is assumed (NaN/inf/signed zero hold).
_CONTRACT = ("contract",)


def _float_binop(b: ir.IRBuilder, op: str, dtype: str, x: ir.Value, y: ir.Value) -> ir.Value:
    if op == "add":
        return b.fadd(x, y, flags=_CONTRACT)
    if op == "sub":
        return b.fsub(x, y, flags=_CONTRACT)
    if op == "mul":
        return b.fmul(x, y, flags=_CONTRACT)
    if op == "div":
        return b.fdiv(x, y)
    if op == "floordiv":
        return intrinsic(b, "floor", dtype, [b.fdiv(x, y)])
    if op == "truncmod":
        return b.frem(x, y)
    if op == "floormod":
        r = b.frem(x, y)
        zero = ir.Constant(x.type, None)
        # fmod has the sign of x; numpy's mod has the sign of y.
        fix = b.and_(b.fcmp_ordered("!=", r, zero), b.xor(b.fcmp_ordered("<", r, zero), b.fcmp_ordered("<", y, zero)))
        return b.select(fix, b.fadd(r, y), r)
    if op in ("min", "max"):
        # numpy.minimum/maximum propagate NaN from either side (unlike llvm.minnum).
        keep_x = b.fcmp_ordered("<=" if op == "min" else ">=", x, y)
        return b.select(b.or_(keep_x, b.fcmp_unordered("uno", x, x)), x, y)
    if op == "pow":
        if gpu_math.is_nvptx(b.module):
            return gpu_math.power(b, x, y)
        t = x.type
        return b.call(declare(b.module, f"llvm.pow.{mangle(t)}", t, [t, t]), [x, y])
    raise CodegenError(f"unknown float operation {op!r}")


def _int_binop(b: ir.IRBuilder, op: str, dtype: str, x: ir.Value, y: ir.Value, y_const: int | None) -> ir.Value:
    signed = is_signed(dtype)
    if op == "add":
        return b.add(x, y)
    if op == "sub":
        return b.sub(x, y)
    if op == "mul":
        return b.mul(x, y)
    if op == "div":  # C semantics: truncate toward zero
        return b.sdiv(x, y) if signed else b.udiv(x, y)
    if op in ("floordiv", "floormod"):
        return _int_floor_divmod(b, op, signed, x, y, y_const)
    if op == "truncmod":  # C semantics: the remainder has the dividend's sign
        return b.srem(x, y) if signed else b.urem(x, y)
    if op in ("min", "max"):
        cmp = b.icmp_signed if signed else b.icmp_unsigned
        return b.select(cmp("<" if op == "min" else ">", x, y), x, y)
    if op == "pow":
        return _int_pow(b, dtype, x, y)
    raise CodegenError(f"unknown integer operation {op!r}")


def _int_floor_divmod(b: ir.IRBuilder, op: str, signed: bool, x: ir.Value, y: ir.Value, y_const: int | None):
    if not signed:
        return b.udiv(x, y) if op == "floordiv" else b.urem(x, y)
    t = x.type
    if y_const is not None and y_const > 0 and y_const & (y_const - 1) == 0:
        # Power of two: floor semantics are exactly an arithmetic shift and a mask.
        shift = y_const.bit_length() - 1
        return b.ashr(x, _ic(t, shift)) if op == "floordiv" else b.and_(x, _ic(t, y_const - 1))
    q, r = b.sdiv(x, y), b.srem(x, y)
    zero = ir.Constant(t, None)
    if y_const is not None and y_const > 0:
        fix = b.icmp_signed("<", r, zero)  # remainder has x's sign; only negative x needs a fix
    else:
        fix = b.and_(b.icmp_signed("!=", r, zero), b.icmp_signed("<", b.xor(r, y), zero))
    if op == "floordiv":
        return b.sub(q, b.zext(fix, t))
    return b.add(r, b.select(fix, y, zero))


def _int_pow(b: ir.IRBuilder, dtype: str, x: ir.Value, y: ir.Value) -> ir.Value:
    t = scalar_type(x.type)
    fn = _ipow_helper(b.module, t)
    return per_lane(b, lambda xs, ys: b.call(fn, [xs, ys]), t, x, y)


def _ipow_helper(module: ir.Module, t: ir.IntType) -> ir.Function:
    """x ** e by repeated squaring; e <= 0 gives 1 (numpy raises for negative integer powers)."""
    name = f"kiln.ipow.i{t.width}"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(module, ir.FunctionType(t, [t, t]), name)
    fn.linkage = "internal"
    entry, loop, done = fn.append_basic_block("entry"), fn.append_basic_block("loop"), fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    base, exp = fn.args
    one, zero = ir.Constant(t, 1), ir.Constant(t, 0)
    b.cbranch(b.icmp_signed(">", exp, zero), loop, done)
    b.position_at_end(loop)
    acc, cur, e = b.phi(t), b.phi(t), b.phi(t)
    odd = b.icmp_unsigned("!=", b.and_(e, one), zero)
    acc2 = b.select(odd, b.mul(acc, cur), acc)
    cur2, e2 = b.mul(cur, cur), b.lshr(e, one)
    acc.add_incoming(one, entry), acc.add_incoming(acc2, loop)
    cur.add_incoming(base, entry), cur.add_incoming(cur2, loop)
    e.add_incoming(exp, entry), e.add_incoming(e2, loop)
    b.cbranch(b.icmp_unsigned("!=", e2, zero), loop, done)
    b.position_at_end(done)
    res = b.phi(t)
    res.add_incoming(one, entry), res.add_incoming(acc2, loop)
    b.ret(res)
    return fn


# ---------------------------------------------------------------- casts

def cast(b: ir.IRBuilder, src: str, dst: str, v: ir.Value) -> ir.Value:
    """numpy/C conversion of a register value from dtype `src` to dtype `dst`."""
    if src == dst:
        return v
    out = _cast(b, src, dst, v)
    # Sub-byte ints wrap to their width, as ml_dtypes' astype does (int4: 9 -> -7).
    return wrap_subbyte(b, dst, out) if dst in SUBBYTE_INTS else out


def _cast(b: ir.IRBuilder, src: str, dst: str, v: ir.Value) -> ir.Value:
    lanes = lanes_of(v)
    to = reg_type(dst, lanes)
    if is_bool(dst):
        return to_bool(b, src, v)
    if is_bool(src):
        return b.uitofp(v, to) if is_float(dst) else b.zext(v, to)
    if is_float(src) and is_float(dst):
        return _float_to_float(b, src, dst, v, to)
    if is_float(src):
        return _float_to_int(b, dst, v, lanes)
    if is_float(dst):
        out = b.sitofp(v, to) if is_signed(src) else b.uitofp(v, to)
        return round_value(b, dst, out)
    sb, db = int_bits(src), int_bits(dst)
    if db < sb:
        return b.trunc(v, to)
    if db > sb:
        return b.sext(v, to) if is_signed(src) else b.zext(v, to)
    return v  # same width, other signedness: same bits


def _float_to_float(b: ir.IRBuilder, src: str, dst: str, v: ir.Value, to: ir.Type) -> ir.Value:
    # Register widths: bfloat16 and float8/float4 are held as float.
    width = {"float16": 16, "float64": 64}
    if width.get(dst, 32) > width.get(src, 32):
        out = b.fpext(v, to)
    elif width.get(dst, 32) < width.get(src, 32):
        out = b.fptrunc(v, to)
    else:
        out = v
    return round_value(b, dst, out)


def _float_to_int(b: ir.IRBuilder, dst: str, v: ir.Value, lanes: int) -> ir.Value:
    bits = int_bits(dst)
    to = reg_type(dst, lanes)
    if bits == 64:
        return b.fptosi(v, to) if is_signed(dst) else b.fptoui(v, to)
    # Narrow targets go through a wider signed int and wrap, as C on x86 (and so numpy) does,
    # so that e.g. -1.0 -> uint8 is 255 rather than LLVM poison.
    wide = with_lanes(I64 if bits == 32 and not is_signed(dst) else I32, lanes)
    w = b.fptosi(v, wide)
    return b.trunc(w, to) if scalar_type(wide).width > bits else w


# ---------------------------------------------------------------- math intrinsics

_LLVM_MATH = {"exp": "exp", "log": "log", "sqrt": "sqrt", "sin": "sin", "cos": "cos", "floor": "floor",
              "ceil": "ceil", "trunc": "trunc", "round": "roundeven"}
_LIBM = {"erf": ("erff", "erf"), "tanh": ("tanhf", "tanh"), "tan": ("tanf", "tan"), "asin": ("asinf", "asin"),
         "acos": ("acosf", "acos"), "atan": ("atanf", "atan"), "sinh": ("sinhf", "sinh"), "cosh": ("coshf", "cosh"),
         "asinh": ("asinhf", "asinh"), "acosh": ("acoshf", "acosh"), "atanh": ("atanhf", "atanh")}
_VECMATH = ("exp", "log", "sin", "cos", "tanh", "erf")  # vecmath.math_call: libmvec or inline polynomials


def intrinsic(b: ir.IRBuilder, name: str, dtype: str, args: list[ir.Value]) -> ir.Value:
    """One of TIR's INTRINSICS applied elementwise to register values of `dtype`."""
    x = args[0]
    if name == "isnan":
        return b.fcmp_unordered("uno", x, x) if is_float(dtype) else const("bool", 0, lanes_of(x))
    if not is_float(dtype):
        return _int_intrinsic(b, name, dtype, x)
    t = x.type
    gpu = gpu_math.intrinsic(b, name, x) if gpu_math.is_nvptx(b.module) else None
    if gpu is not None:
        return round_value(b, dtype, gpu)
    if name in _LLVM_MATH:
        out = vecmath.math_call(b, name, x) if name in _VECMATH else None
        if out is None:
            out = b.call(declare(b.module, f"llvm.{_LLVM_MATH[name]}.{mangle(t)}", t, [t]), [x])
    elif name == "abs":
        out = b.call(declare(b.module, f"llvm.fabs.{mangle(t)}", t, [t]), [x])
    elif name in _LIBM:
        out = vecmath.math_call(b, name, x) if name in _VECMATH else None
        if out is None:
            out = _libm_call(b, name, dtype, x)
    else:
        raise CodegenError(f"unknown intrinsic {name!r}")
    return out if name in ("abs", "floor", "ceil", "trunc", "round") else round_value(b, dtype, out)


def _libm_call(b: ir.IRBuilder, name: str, dtype: str, x: ir.Value) -> ir.Value:
    """tan/asin/... (and float64 erf/tanh) have no LLVM intrinsic: call libm per lane (half goes through float)."""
    f32_name, f64_name = _LIBM[name]
    st = scalar_type(x.type)
    if isinstance(st, ir.DoubleType):
        fn = declare(b.module, f64_name, F64, [F64])
        return per_lane(b, lambda s: b.call(fn, [s]), F64, x)
    fn = declare(b.module, f32_name, F32, [F32])
    if isinstance(st, ir.HalfType):
        return per_lane(b, lambda s: b.fptrunc(b.call(fn, [b.fpext(s, F32)]), st), st, x)
    return per_lane(b, lambda s: b.call(fn, [s]), F32, x)


def _int_intrinsic(b: ir.IRBuilder, name: str, dtype: str, x: ir.Value) -> ir.Value:
    if name in ("floor", "ceil", "round", "trunc"):
        return x  # integers are already integral
    if name == "abs":
        if is_bool(dtype) or not is_signed(dtype):
            return x
        t = x.type
        return b.call(declare(b.module, f"llvm.abs.{mangle(t)}", t, [t, I1]), [x, ir.Constant(I1, 0)])
    raise CodegenError(f"intrinsic {name!r} needs a float argument, got {dtype}")


def reinterpret(b: ir.IRBuilder, src: str, dst: str, v: ir.Value) -> ir.Value:
    """The memory bits of register value `v` (dtype `src`) read as dtype `dst` of the same item size."""
    if itemsize(src) != itemsize(dst):
        raise CodegenError(f"cannot reinterpret {src} as {dst}: item sizes differ")
    lanes = lanes_of(v)
    # Through the memory form: bool is a byte there, bfloat16/float8 their bit patterns, int4 its low bits.
    bits = b.zext(v, with_lanes(mem_type("bool"), lanes)) if is_bool(src) else to_mem(b, src, v)
    bits = b.bitcast(bits, with_lanes(mem_type(dst), lanes))
    if is_bool(dst):
        return b.icmp_unsigned("!=", bits, ir.Constant(bits.type, None))
    return from_mem(b, dst, bits)
