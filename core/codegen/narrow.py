"""Narrow dtypes in LLVM registers: float8/float4/e8m0 (and bfloat16) to and from their bits, exactly
as ml_dtypes rounds (to nearest even), and sub-byte integers wrapped to their width.

Registers hold narrow floats as float and sub-byte ints as i8 (sign- or zero-extended); memory holds
the raw pattern in the low bits of each byte (bfloat16: i16). See core/narrow_dtypes.py for formats.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..narrow_dtypes import MINIFLOATS, SUBBYTE_INTS, MiniFloat
from .llvm_types import F32, I8, I32, lanes_of, splat_const, with_lanes


def _ic(t: ir.Type, value: int) -> ir.Constant:
    return splat_const(ir.Constant(t.element, value), t.count) if isinstance(t, ir.VectorType) else ir.Constant(t, value)


def _fc(t: ir.Type, value: float) -> ir.Constant:
    return splat_const(ir.Constant(t.element, value), t.count) if isinstance(t, ir.VectorType) else ir.Constant(t, value)


# ---------------------------------------------------------------- bfloat16

def bf16_from_bits(b: ir.IRBuilder, bits: ir.Value) -> ir.Value:
    i32 = with_lanes(I32, lanes_of(bits))
    wide = b.shl(b.zext(bits, i32), _ic(i32, 16))
    return b.bitcast(wide, with_lanes(F32, lanes_of(bits)))


def bf16_to_bits(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """float -> bfloat16 bits, rounding to nearest even; NaN stays a quiet NaN."""
    lanes = lanes_of(v)
    i32 = with_lanes(I32, lanes)
    bits = b.bitcast(v, i32)
    lsb = b.and_(b.lshr(bits, _ic(i32, 16)), _ic(i32, 1))
    rounded = b.lshr(b.add(bits, b.add(lsb, _ic(i32, 0x7FFF))), _ic(i32, 16))
    quiet = b.or_(b.lshr(bits, _ic(i32, 16)), _ic(i32, 0x40))
    out = b.select(b.fcmp_unordered("uno", v, v), quiet, rounded)
    return b.trunc(out, with_lanes(ir.IntType(16), lanes))


# ---------------------------------------------------------------- float8 / float4 / e8m0

def _formula_bits(fmt: MiniFloat, codes: np.ndarray) -> np.ndarray:
    """The float32 bits minifloat_from_bits computes arithmetically (numpy mirror of the IR below)."""
    c = codes.astype(np.uint32)
    e = (c >> fmt.mant_bits) & ((1 << fmt.exp_bits) - 1)
    m = c & ((1 << fmt.mant_bits) - 1)
    normal = ((e + 127 - fmt.bias) << 23) | (m << (23 - fmt.mant_bits))
    sub = (m.astype(np.float32) * np.float32(2.0 ** (1 - fmt.bias - fmt.mant_bits))).view(np.uint32)
    out = np.where(e == 0, sub, normal).astype(np.uint32)
    if fmt.signed:
        out |= ((c >> (fmt.bits - 1)) & 1) << 31
    return out


def _exceptions(dtype: str) -> list[tuple[int, int]]:
    """(code, float32 bits) where the format's formula is not the value: inf and NaN patterns, fnuz's
    NaN in the place of -0, e8m0's 2^-127 at code 0. Derived from ml_dtypes, so decoding stays exact."""
    fmt = MINIFLOATS[dtype]
    codes = np.arange(1 << fmt.bits, dtype=np.uint8)
    truth = codes.view(np.dtype(dtype)).astype(np.float32).view(np.uint32)
    computed = _formula_bits(fmt, codes)
    return [(int(c), int(t)) for c, t, f in zip(codes, truth, computed) if t != f]


def minifloat_from_bits(b: ir.IRBuilder, dtype: str, bits: ir.Value) -> ir.Value:
    """Bit pattern (i8, low bits) -> float: exponent re-biased and mantissa shifted in the integer domain,
    subnormals scaled by the format's smallest step, the few special patterns selected; vectorizes."""
    fmt = MINIFLOATS[dtype]
    lanes = lanes_of(bits)
    i32, f32 = with_lanes(I32, lanes), with_lanes(F32, lanes)
    c = b.zext(b.and_(bits, _ic(bits.type, (1 << fmt.bits) - 1)), i32)
    e = b.and_(b.lshr(c, _ic(i32, fmt.mant_bits)), _ic(i32, (1 << fmt.exp_bits) - 1))
    m = b.and_(c, _ic(i32, (1 << fmt.mant_bits) - 1))
    normal = b.or_(b.shl(b.add(e, _ic(i32, 127 - fmt.bias)), _ic(i32, 23)), b.shl(m, _ic(i32, 23 - fmt.mant_bits)))
    step = _fc(f32, 2.0 ** (1 - fmt.bias - fmt.mant_bits))
    sub = b.bitcast(b.fmul(b.uitofp(m, f32), step), i32)
    out = b.select(b.icmp_unsigned("==", e, _ic(i32, 0)), sub, normal)
    if fmt.signed:
        sign = b.and_(b.lshr(c, _ic(i32, fmt.bits - 1)), _ic(i32, 1))
        out = b.or_(out, b.shl(sign, _ic(i32, 31)))
    for code, value in _exceptions(dtype):
        out = b.select(b.icmp_unsigned("==", c, _ic(i32, code)), _ic(i32, value - (1 << 32) if value >= 1 << 31 else value), out)
    return b.bitcast(out, f32)


def minifloat_to_bits(b: ir.IRBuilder, dtype: str, v: ir.Value) -> ir.Value:
    """float -> bit pattern (i8), rounding to nearest even like ml_dtypes; too large becomes the format's
    overflow pattern (inf or NaN; float4 saturates), NaN its NaN pattern."""
    fmt = MINIFLOATS[dtype]
    if not fmt.signed:
        return _e8m0_to_bits(b, v)
    lanes = lanes_of(v)
    i32, f32 = with_lanes(I32, lanes), with_lanes(F32, lanes)
    bits = b.bitcast(v, i32)
    sign = b.lshr(bits, _ic(i32, 31))
    mag = b.and_(bits, _ic(i32, 0x7FFFFFFF))
    shift = 23 - fmt.mant_bits
    min_normal_exp = 1 - fmt.bias  # the smallest normal's exponent; below it the format is subnormal
    # Normal range: re-bias the exponent and round the mantissa to nearest even in the integer domain
    # (a carry out of the mantissa correctly bumps the exponent).
    odd = b.and_(b.lshr(mag, _ic(i32, shift)), _ic(i32, 1))
    normal = b.add(mag, _ic(i32, ((fmt.bias - 127) << 23) + (1 << (shift - 1)) - 1))
    normal = b.lshr(b.add(normal, odd), _ic(i32, shift))
    # Subnormal range: adding a float whose ulp is the format's subnormal step makes the FPU round
    # (to nearest even); the difference of the bit patterns is the code (ryg's float->half trick).
    magic_bits = (127 + min_normal_exp - fmt.mant_bits + 23) << 23
    magic = b.bitcast(_ic(i32, magic_bits), F32) if lanes == 1 else b.bitcast(_ic(i32, magic_bits), f32)
    absval = b.bitcast(mag, f32)
    sub = b.sub(b.bitcast(b.fadd(absval, magic), i32), _ic(i32, magic_bits))
    is_sub = b.icmp_unsigned("<", mag, _ic(i32, (127 + min_normal_exp) << 23))
    code = b.select(is_sub, sub, normal)
    code = b.select(b.icmp_unsigned(">", code, _ic(i32, fmt.max_code)), _ic(i32, fmt.overflow_code), code)
    sign_bit = 1 << (fmt.bits - 1)
    if fmt.unsigned_zero:
        # One zero only: -0 (and anything rounding to it) is +0; NaN and overflow are 0x80 unsigned.
        signed = b.select(b.icmp_unsigned("==", code, _ic(i32, 0)), code,
                          b.or_(code, b.mul(sign, _ic(i32, sign_bit))))
        signed = b.select(b.icmp_unsigned("==", code, _ic(i32, fmt.overflow_code)), code, signed)
        nan = _ic(i32, fmt.nan_code)
    else:
        signed = b.or_(code, b.mul(sign, _ic(i32, sign_bit)))
        nan = b.xor(_ic(i32, fmt.nan_code), b.mul(sign, _ic(i32, sign_bit)))
    out = b.select(b.fcmp_unordered("uno", v, v), nan, signed)
    return b.trunc(out, with_lanes(I8, lanes))


def _e8m0_to_bits(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """float -> e8m0 as ONNX's Cast does by default (round_mode="up", saturate=1): the exponent field,
    plus one when any fraction bit is set unless that passes 2^127; inf/NaN -> 0xFF; the sign is ignored."""
    lanes = lanes_of(v)
    i32 = with_lanes(I32, lanes)
    bits = b.bitcast(v, i32)
    exponent = b.and_(b.lshr(bits, _ic(i32, 23)), _ic(i32, 0xFF))
    fraction = b.and_(bits, _ic(i32, 0x7FFFFF))
    up = b.and_(b.icmp_unsigned("!=", fraction, _ic(i32, 0)), b.icmp_unsigned("<", exponent, _ic(i32, 0xFE)))
    code = b.select(b.icmp_unsigned("==", exponent, _ic(i32, 0xFF)), exponent,
                    b.add(exponent, b.zext(up, i32)))
    # 2^-127 (pattern 0, a float32 subnormal) must encode back to 0, so that rounding a value that is
    # already e8m0 (what every operation's result goes through) leaves it as it is.
    code = b.select(b.icmp_unsigned("==", b.and_(bits, _ic(i32, 0x7FFFFFFF)), _ic(i32, 0x00400000)),
                    _ic(i32, 0), code)
    return b.trunc(code, with_lanes(I8, lanes))


# ---------------------------------------------------------------- sub-byte integers

def wrap_subbyte(b: ir.IRBuilder, dtype: str, v: ir.Value) -> ir.Value:
    """An i8 register value wrapped to the dtype's width (two's complement), as numpy/ml_dtypes wrap."""
    bits, signed = SUBBYTE_INTS[dtype]
    if signed:
        return b.ashr(b.shl(v, _ic(v.type, 8 - bits)), _ic(v.type, 8 - bits))
    return b.and_(v, _ic(v.type, (1 << bits) - 1))


# ---------------------------------------------------------------- one entry point per direction

def from_mem(b: ir.IRBuilder, dtype: str, raw: ir.Value) -> ir.Value:
    """Memory pattern -> register value for a narrow dtype (others pass through)."""
    if dtype == "bfloat16":
        return bf16_from_bits(b, raw)
    if dtype in MINIFLOATS:
        return minifloat_from_bits(b, dtype, raw)
    if dtype in SUBBYTE_INTS:
        return wrap_subbyte(b, dtype, raw)
    return raw


def to_mem(b: ir.IRBuilder, dtype: str, value: ir.Value) -> ir.Value:
    """Register value -> memory pattern for a narrow dtype (others pass through)."""
    if dtype == "bfloat16":
        return bf16_to_bits(b, value)
    if dtype in MINIFLOATS:
        return minifloat_to_bits(b, dtype, value)
    if dtype in SUBBYTE_INTS:
        bits, _ = SUBBYTE_INTS[dtype]
        return b.and_(value, _ic(value.type, (1 << bits) - 1))
    return value


def round_value(b: ir.IRBuilder, dtype: str, value: ir.Value) -> ir.Value:
    """A register value rounded (floats) or wrapped (sub-byte ints) to what `dtype` can hold: what each
    operation on a narrow dtype does to its result. Identity for every other dtype."""
    if dtype == "bfloat16":
        return bf16_from_bits(b, bf16_to_bits(b, value))
    if dtype in MINIFLOATS:
        return minifloat_from_bits(b, dtype, minifloat_to_bits(b, dtype, value))
    if dtype in SUBBYTE_INTS:
        return wrap_subbyte(b, dtype, value)
    return value


__all__ = ["MiniFloat", "bf16_from_bits", "bf16_to_bits", "minifloat_from_bits", "minifloat_to_bits",
           "wrap_subbyte", "from_mem", "to_mem", "round_value"]
