"""TIR dtypes as LLVM types: how a dtype is stored in memory and how it is held in registers."""
# bool is i8 in memory and i1 in registers; bfloat16 is i16 in memory and float in registers
# (llvmlite has no `bfloat`), rounded back to bfloat16 after each operation; float8/float4/e8m0 are
# i8 in memory (their bit pattern) and float in registers, rounded likewise; int4/uint4/int2/uint2
# are i8 in both (wrapped to their width after each operation). Every other dtype has one LLVM type
# for both (float16 arithmetic is done by LLVM through float, rounding each op). See codegen/narrow.py.
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..errors import CodegenError
from ..narrow_dtypes import MINIFLOATS, NARROW_FLOAT_DTYPES, SUBBYTE_INTS

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()
F64 = ir.DoubleType()
F16 = ir.HalfType()
PTR = ir.PointerType()
VOID = ir.VoidType()

# Register widths: sub-byte ints live in i8 registers.
_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64,
             **{name: 8 for name in SUBBYTE_INTS}}
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "bool": 1, **{k: v // 8 for k, v in _INT_BITS.items()},
             **{name: 1 for name in MINIFLOATS}}
_FLOATS = frozenset({"float16", "float32", "float64", *NARROW_FLOAT_DTYPES})


def is_float(dtype: str) -> bool:
    return dtype in _FLOATS


def is_int(dtype: str) -> bool:
    return dtype in _INT_BITS


def is_signed(dtype: str) -> bool:
    return dtype.startswith("int")


def is_narrow_float(dtype: str) -> bool:
    """Held as float in registers but stored (and rounded after each operation) in fewer bits."""
    return dtype in NARROW_FLOAT_DTYPES


def is_bool(dtype: str) -> bool:
    return dtype == "bool"


def int_bits(dtype: str) -> int:
    return _INT_BITS[dtype]


def itemsize(dtype: str) -> int:
    try:
        return _ITEMSIZE[dtype]
    except KeyError:
        raise CodegenError(f"codegen does not support dtype {dtype!r}") from None


def mem_type(dtype: str) -> ir.Type:
    """The type one element has in memory (what a Load reads and a Store writes)."""
    if dtype == "bool":
        return I8
    if dtype == "bfloat16":
        return ir.IntType(16)
    if dtype in MINIFLOATS:
        return I8
    return reg_type(dtype)


def reg_type(dtype: str, lanes: int = 1) -> ir.Type:
    """The type a value of `dtype` has in a register; a vector of `lanes` when lanes > 1."""
    if dtype == "bool":
        t: ir.Type = I1
    elif dtype in _INT_BITS:
        t = ir.IntType(_INT_BITS[dtype])
    elif dtype == "float32" or dtype in NARROW_FLOAT_DTYPES:
        t = F32
    elif dtype == "float64":
        t = F64
    elif dtype == "float16":
        t = F16
    else:
        raise CodegenError(f"codegen does not support dtype {dtype!r}")
    return ir.VectorType(t, lanes) if lanes > 1 else t


def lanes_of(value: ir.Value) -> int:
    return value.type.count if isinstance(value.type, ir.VectorType) else 1


def scalar_type(t: ir.Type) -> ir.Type:
    return t.element if isinstance(t, ir.VectorType) else t


def with_lanes(t: ir.Type, lanes: int) -> ir.Type:
    t = scalar_type(t)
    return ir.VectorType(t, lanes) if lanes > 1 else t


def const(dtype: str, value, lanes: int = 1) -> ir.Constant:
    """A constant of `dtype` in register form (splat across lanes when lanes > 1)."""
    t = reg_type(dtype)
    if dtype == "bool":
        v = ir.Constant(t, int(bool(value)))
    elif dtype in MINIFLOATS:  # the nearest value the format holds, as a float register
        v = ir.Constant(t, float(np.array(value, np.float32).astype(dtype).astype(np.float32)))
    elif is_float(dtype):
        v = ir.Constant(t, float(value))
    else:
        # Wrap like numpy does so out-of-range Python ints become the same bit pattern.
        bits = int_bits(dtype)
        v = ir.Constant(t, int(value) & ((1 << bits) - 1))
    return splat_const(v, lanes) if lanes > 1 else v


def splat_const(value: ir.Constant, lanes: int) -> ir.Constant:
    return ir.Constant(ir.VectorType(value.type, lanes), [value] * lanes)


def mangle(t: ir.Type) -> str:
    """LLVM's overload suffix for a type: f32, v8f32, i64, v4i64, f16, f64."""
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{mangle(t.element)}"
    if isinstance(t, ir.FloatType):
        return "f32"
    if isinstance(t, ir.DoubleType):
        return "f64"
    if isinstance(t, ir.HalfType):
        return "f16"
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    if isinstance(t, ir.PointerType):
        return "p0"
    raise CodegenError(f"no intrinsic mangling for LLVM type {t}")
