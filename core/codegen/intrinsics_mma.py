"""The LLVM lowering of CUDA tensor cores' `mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32` (sm_80 and later).

Declared per thread (core/te/intrinsics.py), as TIR sees each GPU thread: c[2, 2] += sum_{k<16} f32(a[2, 16]) * f32(b[16, 2]) (float16
operands, float32 sums), a thread's two rows of A (any row stride), the 16 k of one step, and two adjacent columns.
The warp's 32 threads compute one 16 x 8 tile together: lane l = 4 g + t (g = l / 4, t = l % 4) owns the outputs
(its a rows) x (columns 2t, 2t+1 of an 8-column tile whose first column is its b region's start minus 2t). The
instruction's fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"): row g of the instruction's A is the lane's
a row 0, row g + 8 its a row 1, so lanes 4g..4g+3 must hold the same a rows (a schedule's rows depend on g only,
never on t); each lane supplies A[g or g+8][2t, 2t+1, 2t+8, 2t+9] from its own rows, B[2t, 2t+1, 2t+8, 2t+9][g] from
the tile's column g (outside its own two columns: hence the tile start), and gets D[g][2t..] and D[g+8][2t..]: its
own four outputs. Regions start at even elements with even row strides (32-bit pairs of halves).
"""
from __future__ import annotations

from llvmlite import ir

from ..errors import CodegenError
from ..te.intrinsics import MMA_F16
from .arith import declare
from .llvm_types import F16, F32, I32, I64

_PAIR = ir.VectorType(F16, 2)


def _at(b: ir.IRBuilder, ptr: ir.Value, offset: ir.Value, etype: ir.Type) -> ir.Value:
    return b.gep(ptr, [offset], inbounds=True, source_etype=etype)


def _emit_mma(b: ir.IRBuilder, pointers, strides) -> None:
    (c_ptr, a_ptr, b_ptr), ((c_row, _), (a_row, _), (b_k, _)) = pointers, strides
    if a_row % 2:
        raise CodegenError(f"{MMA_F16}: a's rows are {a_row} halves apart; its 32-bit pair loads need an even stride")
    lane = b.zext(b.call(declare(b.module, "llvm.nvvm.read.ptx.sreg.laneid", I32, []), []), I64)
    g = b.lshr(lane, ir.Constant(I64, 2))
    two_t = b.shl(b.and_(lane, ir.Constant(I64, 3)), ir.Constant(I64, 1))
    const = lambda v: ir.Constant(I64, v)  # noqa: E731

    def a_pair(row: int, column_offset: int) -> ir.Value:
        index = b.add(const(row * a_row + column_offset), two_t)
        return b.load(_at(b, a_ptr, index, F16), typ=_PAIR, align=4)

    tile_column = b.sub(g, two_t)  # the tile's column g, from this lane's column 2t

    def b_pair(k: int) -> ir.Value:  # B[k, g], B[k + 1, g] with k = 2t (+ 8)
        pair = ir.Constant(_PAIR, ir.Undefined)
        for half in (0, 1):
            row = b.mul(b.add(two_t, const(k + half)), const(b_k))
            value = b.load(_at(b, b_ptr, b.add(row, tile_column), F16), typ=F16, align=2)
            pair = b.insert_element(pair, value, ir.Constant(I32, half))
        return pair

    a_frag = [a_pair(0, 0), a_pair(1, 0), a_pair(0, 8), a_pair(1, 8)]
    b_frag = [b_pair(0), b_pair(8)]
    c_slots = [_at(b, c_ptr, const(h * c_row + e), F32) for h in (0, 1) for e in (0, 1)]
    acc = [b.load(p, typ=F32, align=4) for p in c_slots]
    result_t = ir.LiteralStructType([F32] * 4)
    mma = declare(b.module, "llvm.nvvm.mma.m16n8k16.row.col.f32.f32", result_t, [_PAIR] * 6 + [F32] * 4)
    d = b.call(mma, a_frag + b_frag + acc)
    for slot, p in enumerate(c_slots):
        b.store(b.extract_value(d, slot), p, align=4)


LOWERINGS = {MMA_F16: _emit_mma}
