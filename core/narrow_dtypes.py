"""The narrow dtypes Kiln carries through ml_dtypes (bfloat16, float8, float4, int4/int2): one table of
their formats, read by the frontend, TIR and code generation alike.

Names are ml_dtypes' own (numpy knows them once ml_dtypes is imported), so `np.dtype(name)` works
everywhere. In memory every one of them takes whole bytes, exactly as ml_dtypes lays them out:
bfloat16 is 2 bytes; float8 and float8_e8m0fnu 1 byte; int4/uint4/int2/uint2/float4_e2m1fn one
element per byte, the value's bits in the low bits and zeros above (ONNX packs two 4-bit or four
2-bit values per byte only inside a TensorProto; onnx.numpy_helper unpacks them at the boundary).
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes  # noqa: F401  (registers the names below with numpy)


@dataclass(frozen=True)
class MiniFloat:
    """A float format narrower than float16: sign, `exp_bits` exponent bits, `mant_bits` mantissa bits."""
    exp_bits: int
    mant_bits: int
    bias: int
    max_code: int            # the largest finite magnitude's bit pattern (sign bit clear)
    overflow_code: int       # what a finite value too large to round to max_code becomes (before the sign)
    nan_code: int            # what NaN becomes (before the sign)
    unsigned_zero: bool      # "fnuz": one zero, the pattern with only the sign bit set is NaN
    signed: bool = True

    @property
    def bits(self) -> int:
        return self.exp_bits + self.mant_bits + (1 if self.signed else 0)


# Overflow follows ml_dtypes' astype (non-saturating): ONNX's saturate=1 clamps to max_code first.
MINIFLOATS: dict[str, MiniFloat] = {
    "float8_e4m3fn": MiniFloat(4, 3, 7, 0x7E, 0x7F, 0x7F, False),
    "float8_e4m3fnuz": MiniFloat(4, 3, 8, 0x7F, 0x80, 0x80, True),
    "float8_e5m2": MiniFloat(5, 2, 15, 0x7B, 0x7C, 0x7E, False),
    "float8_e5m2fnuz": MiniFloat(5, 2, 16, 0x7F, 0x80, 0x80, True),
    # float4 has neither inf nor NaN: ml_dtypes (and ONNX) saturate, and NaN becomes -0.
    "float4_e2m1fn": MiniFloat(2, 1, 1, 0x7, 0x7, 0x8, False),
    # e8m0: exponent only, unsigned, no zero; 0xFF is NaN. ONNX rounds it up by default (see narrow.py).
    "float8_e8m0fnu": MiniFloat(8, 0, 127, 0xFE, 0xFF, 0xFF, False, signed=False),
}

# Every float held as float32 in registers and rounded back to its own format after each operation.
NARROW_FLOAT_DTYPES = ("bfloat16", *MINIFLOATS)

# Sub-byte integers: value bits and signedness; one byte each in memory, i8 in registers.
SUBBYTE_INTS: dict[str, tuple[int, bool]] = {"int4": (4, True), "uint4": (4, False), "int2": (2, True),
                                             "uint2": (2, False)}

NARROW_DTYPES = frozenset(NARROW_FLOAT_DTYPES) | frozenset(SUBBYTE_INTS)


def is_narrow_float(dtype: str) -> bool:
    return dtype in MINIFLOATS or dtype == "bfloat16"


def max_finite(dtype: str) -> float:
    """The largest finite value of a narrow float (what ONNX's saturate=1 clamps to)."""
    import numpy as np
    return float(ml_dtypes.finfo(np.dtype(dtype)).max)


def int_range(dtype: str) -> tuple[int, int]:
    bits, signed = SUBBYTE_INTS[dtype]
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def cast_array(x, dtype: str):
    """numpy's astype, except to float8_e8m0fnu where it rounds up as ONNX's Cast does by default (and as
    the generated code does): constant folding must give what the compiled kernel gives."""
    import numpy as np
    if dtype != "float8_e8m0fnu":
        return x.astype(dtype)
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    exponent, fraction = (bits >> 23) & 0xFF, bits & 0x7FFFFF
    code = exponent + ((fraction != 0) & (exponent < 0xFE))
    code = np.where((bits & 0x7FFFFFFF) == 0x00400000, 0, code)  # 2^-127 is code 0 already
    return code.astype(np.uint8).view(np.dtype(dtype))


def packed_nbytes(dtype: str, count: int) -> int:
    """Bytes `count` elements of `dtype` take inside an ONNX TensorProto (raw or external data): 4- and 2-bit
    types are packed there (two or four per byte, the last byte padded), unlike in Kiln's memory."""
    import numpy as np
    bits = SUBBYTE_INTS[dtype][0] if dtype in SUBBYTE_INTS else \
        MINIFLOATS[dtype].bits if dtype in MINIFLOATS else np.dtype(dtype).itemsize * 8
    return (count * bits + 7) // 8
