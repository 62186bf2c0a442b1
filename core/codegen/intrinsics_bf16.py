"""The LLVM lowerings of x86 AVX-512-BF16's tensor intrinsics (declared in core/te/intrinsics.py; Cooper Lake, Sapphire Rapids, Zen 4 and later; the `sapphirerapids` target):

- `vdpbf16ps` (zmm): c[16] += sum_{k<2} f32(a[k]) * f32(b[16, 2]): a pair of bfloat16 activations shared by every
  lane, two bfloat16 weights per lane (lane-major, as the 8-bit dots' packed weights), float32 sums; the products
  are exact in float32 and each pair is added to the lane at once (one rounding per pair instead of two).
- `vcvtneps2bf16` (zmm -> ymm): c[16] = bfloat16(a[16]), rounding to nearest even as ml_dtypes does, except that
  denormal inputs and results flush to zero (the instruction ignores MXCSR), below bfloat16's tolerance anyway.

Memory holds bfloat16 as i16 (core/codegen/narrow.py); llvmlite has no `bfloat` type, so the lowerings name LLVM's
with a small ir.Type and bitcast i16 vectors to it (LLVM 22's signatures take <N x bfloat>).
"""
from __future__ import annotations

from llvmlite import ir

from ..te.intrinsics import BF16_LANES as LANES, BF16_PAIR as PAIR
from .arith import declare, splat
from .llvm_types import F32, I32


class BFloatType(ir.Type):
    """LLVM's `bfloat` (absent from llvmlite.ir)."""

    def _to_string(self) -> str:
        return "bfloat"

    def __eq__(self, other) -> bool:
        return isinstance(other, BFloatType)

    def __hash__(self) -> int:
        return hash("bfloat")


BF16 = BFloatType()


def _emit_dot(b: ir.IRBuilder, pointers) -> None:
    """a's two bfloat16 (one i32) repeated in each lane; b's 32 bfloat16 one zmm load."""
    c_ptr, a_ptr, b_ptr = pointers
    acc_t, pairs_t = ir.VectorType(F32, LANES), ir.VectorType(BF16, LANES * PAIR)
    fn = declare(b.module, "llvm.x86.avx512bf16.dpbf16ps.512", acc_t, [acc_t, pairs_t, pairs_t])
    activations = b.bitcast(splat(b, b.load(a_ptr, typ=I32, align=2), LANES), pairs_t)
    weights = b.bitcast(b.load(b_ptr, typ=ir.VectorType(ir.IntType(16), LANES * PAIR), align=2), pairs_t)
    acc = b.load(c_ptr, typ=acc_t, align=4)
    b.store(b.call(fn, [acc, activations, weights]), c_ptr, align=4)


def _emit_convert(b: ir.IRBuilder, pointers) -> None:
    c_ptr, a_ptr = pointers
    floats_t = ir.VectorType(F32, LANES)
    fn = declare(b.module, "llvm.x86.avx512bf16.cvtneps2bf16.512", ir.VectorType(BF16, LANES), [floats_t])
    narrow = b.call(fn, [b.load(a_ptr, typ=floats_t, align=4)])
    b.store(b.bitcast(narrow, ir.VectorType(ir.IntType(16), LANES)), c_ptr, align=2)


LOWERINGS = {"x86_avx512bf16_dot_16x2": _emit_dot, "x86_avx512bf16_cvt_16": _emit_convert}
