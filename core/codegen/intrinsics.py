"""The LLVM lowerings of the tensor intrinsics (declared as data in core/te/intrinsics.py), by name, and the codegen
of an IntrinsicCall: the 8-bit dot products here; AVX-512-BF16's in intrinsics_bf16.py, CUDA tensor cores' in
intrinsics_mma.py.

- x86 AVX2 (8 lanes): `vpmaddubsw` would saturate its int16 pair sums (255 * -128 * 2 < -32768, the
  case MLAS leaves to 7-bit weights). Exact: int16 data (widened once, by the kernel's data stage) times
  int8 weights sign-extended as loaded, two deep (`vpmaddwd`: pair sums in int32); or, from 8-bit data,
  both operands widened per call. Weights within +-64 (ONNX Runtime's reduce_range) cannot saturate, and
  get the `vpmaddubsw` + `vpmaddwd` lowering. (On AMD Zen 3 either multiply issues once a cycle against
  two FMAs: 16 products a cycle, as float32's.)
- VNNI's `vpdpbusd`/`vpdpwssd`, Arm's `sdot`/`udot`: one LLVM intrinsic each; CUDA `dp4a`: one per lane.
"""
from __future__ import annotations

from typing import Callable

from llvmlite import ir

from ..errors import CodegenError
from ..te.intrinsics import DEPTH, TensorIntrinsic, get_intrinsic, intrinsics_for
from ..tir.stmt import IntrinsicCall
from . import intrinsics_bf16, intrinsics_mma
from .arith import declare, splat
from .llvm_types import I32


def _vector(lanes: int, bits: int = 32) -> ir.VectorType:
    return ir.VectorType(ir.IntType(bits), lanes)


def _mask(values) -> ir.Constant:
    return ir.Constant(_vector(len(values)), [ir.Constant(I32, v) for v in values])


def _accumulate(b: ir.IRBuilder, c_ptr: ir.Value, lanes: int, update) -> None:
    """c[0:lanes] = update(c[0:lanes]) on an int32 vector (unaligned: regions start anywhere)."""
    acc = b.load(c_ptr, typ=_vector(lanes), align=4)
    b.store(update(acc), c_ptr, align=4)


def _activations(b: ir.IRBuilder, a_ptr: ir.Value, lanes: int) -> ir.Value:
    """The four activation bytes as one i32, repeated in every lane."""
    return splat(b, b.load(a_ptr, typ=I32, align=1), lanes)


def _dot_instruction(llvm_name: str, lanes: int, byte_operands: bool = False):
    """A lowering calling one LLVM dot-product intrinsic `acc, a, b -> acc` on `lanes` int32 lanes
    (`byte_operands`: it takes a and b as <4*lanes x i8>, as Arm's sdot/udot)."""

    def emit(b: ir.IRBuilder, pointers) -> None:
        c_ptr, a_ptr, b_ptr = pointers
        vec = _vector(lanes)
        operand_t = _vector(lanes * DEPTH, 8) if byte_operands else vec
        fn = declare(b.module, llvm_name, vec, [vec, operand_t, operand_t])
        a_val = _activations(b, a_ptr, lanes)
        weights = b.load(b_ptr, typ=operand_t, align=1)
        if byte_operands:
            a_val = b.bitcast(a_val, operand_t)
        _accumulate(b, c_ptr, lanes, lambda acc: b.call(fn, [acc, a_val, weights]))

    return emit


def _emit_avx2_exact(b: ir.IRBuilder, pointers) -> None:
    """8 lanes: b's 32 bytes widened to two <16 x i16> (lanes 0-3, 4-7), a's 4 bytes zero-extended and
    repeated; vpmaddwd gives per lane two pair sums (k 0-1, k 2-3), added after an even/odd shuffle."""
    c_ptr, a_ptr, b_ptr = pointers
    i16x16 = _vector(16, 16)
    pmadd = declare(b.module, "llvm.x86.avx2.pmadd.wd", _vector(8), [i16x16, i16x16])
    weights = b.load(b_ptr, typ=_vector(32, 8), align=1)
    halves = [b.sext(b.shuffle_vector(weights, weights, _mask(range(16 * h, 16 * h + 16))), i16x16) for h in (0, 1)]
    four = b.load(a_ptr, typ=_vector(4, 8), align=1)
    acts = b.zext(b.shuffle_vector(four, four, _mask([0, 1, 2, 3] * 4)), i16x16)
    pairs = [b.call(pmadd, [acts, half]) for half in halves]
    even = b.shuffle_vector(pairs[0], pairs[1], _mask(range(0, 16, 2)))
    odd = b.shuffle_vector(pairs[0], pairs[1], _mask(range(1, 16, 2)))
    _accumulate(b, c_ptr, 8, lambda acc: b.add(acc, b.add(even, odd)))


def _emit_avx2_words(b: ir.IRBuilder, pointers) -> None:
    """8 lanes x 2 deep: a's two int16 repeated in every lane (one 32-bit broadcast), b's 16 bytes sign-extended
    (vpmovsxbw, once per weight load of a register tile), vpmaddwd: each lane's pair sum, exact in int32."""
    c_ptr, a_ptr, b_ptr = pointers
    i16x16 = _vector(16, 16)
    pmadd = declare(b.module, "llvm.x86.avx2.pmadd.wd", _vector(8), [i16x16, i16x16])
    acts = b.bitcast(_activations(b, a_ptr, 8), i16x16)
    weights = b.sext(b.load(b_ptr, typ=_vector(16, 8), align=1), i16x16)
    _accumulate(b, c_ptr, 8, lambda acc: b.add(acc, b.call(pmadd, [acts, weights])))


def _emit_vnni_words(b: ir.IRBuilder, pointers) -> None:
    """The same operands as _emit_avx2_words, the pair sums accumulated by one vpdpwssd (AVX-512 VNNI on ymm)."""
    c_ptr, a_ptr, b_ptr = pointers
    vec = _vector(8)
    dot = declare(b.module, "llvm.x86.avx512.vpdpwssd.256", vec, [vec, vec, vec])
    weights = b.bitcast(b.sext(b.load(b_ptr, typ=_vector(16, 8), align=1), _vector(16, 16)), vec)
    acts = _activations(b, a_ptr, 8)
    _accumulate(b, c_ptr, 8, lambda acc: b.call(dot, [acc, acts, weights]))


def _emit_avx2_pairs(b: ir.IRBuilder, pointers) -> None:
    """8 lanes: vpmaddubsw sums the u8 x s8 products in pairs as int16, vpmaddwd by ones sums the pairs
    as int32. A pair sum saturates beyond 2 * 255 * 64, so this lowering is declared for |w| <= 64 only
    (ONNX Runtime's reduce_range weights); others take the exact lowering above."""
    c_ptr, a_ptr, b_ptr = pointers
    i8x32, i16x16 = _vector(32, 8), _vector(16, 16)
    pairs = declare(b.module, "llvm.x86.avx2.pmadd.ub.sw", i16x16, [i8x32, i8x32])
    widen = declare(b.module, "llvm.x86.avx2.pmadd.wd", _vector(8), [i16x16, i16x16])
    acts = b.bitcast(_activations(b, a_ptr, 8), i8x32)
    weights = b.load(b_ptr, typ=i8x32, align=1)
    ones = ir.Constant(i16x16, [ir.Constant(ir.IntType(16), 1)] * 16)
    _accumulate(b, c_ptr, 8, lambda acc: b.add(acc, b.call(widen, [b.call(pairs, [acts, weights]), ones])))


def _dp4a(llvm_name: str):
    def emit(b: ir.IRBuilder, pointers) -> None:
        """One lane: c += four 8-bit products (PTX dp4a); the regions start 4-byte aligned (K is packed in
        whole groups of 4), which a GPU's 32-bit loads need."""
        c_ptr, a_ptr, b_ptr = pointers
        fn = declare(b.module, llvm_name, I32, [I32, I32, I32])
        a_val, b_val = (b.load(p, typ=I32, align=4) for p in (a_ptr, b_ptr))
        b.store(b.call(fn, [a_val, b_val, b.load(c_ptr, typ=I32, align=4)]), c_ptr, align=4)

    return emit


# Each declared intrinsic's lowering, `emit(builder, pointers)` (a strided one's also takes the operands' strides).
LOWERINGS: dict[str, Callable] = {
    "x86_vnni_u8s8_16x4": _dot_instruction("llvm.x86.avx512.vpdpbusd.512", 16),
    "x86_avxvnni_u8s8_8x4": _dot_instruction("llvm.x86.avx512.vpdpbusd.256", 8),
    "x86_avx512vl_vnni_u8s8_8x4": _dot_instruction("llvm.x86.avx512.vpdpbusd.256", 8),
    "x86_avx512vl_vnni_s16s8_8x2": _emit_vnni_words,
    "x86_avx2_u8s8_8x4": _emit_avx2_exact,
    "x86_avx2_s16s8_8x2": _emit_avx2_words,
    "x86_avx2_u8s7_8x4": _emit_avx2_pairs,
    "aarch64_sdot_s8s8_4x4": _dot_instruction("llvm.aarch64.neon.sdot.v4i32.v16i8", 4, byte_operands=True),
    "aarch64_udot_u8u8_4x4": _dot_instruction("llvm.aarch64.neon.udot.v4i32.v16i8", 4, byte_operands=True),
    "cuda_dp4a_s8s8_1x4": _dp4a("llvm.nvvm.idp4a.s.s"),
    "cuda_dp4a_u8s8_1x4": _dp4a("llvm.nvvm.idp4a.u.s"),
    **intrinsics_bf16.LOWERINGS,
    **intrinsics_mma.LOWERINGS,
}


BYTE_TABLE = 256  # a LookupTable's entries (core/kernels/quantize.py)


def byte_table_lookup(fe, buf, index: ir.Value):
    """`buf` (256 8-bit entries: a LookupTable) read at a vector of up to 64 indices, on x86 with AVX-512 VBMI:
    vpermi2b over each 128-byte half of the table and a blend by the index's top bit, instead of one scalar load
    per lane (vectorize.py's gather). None where that does not apply."""
    lanes = index.type.count if isinstance(index.type, ir.VectorType) else 1
    features = set(fe.ctx.target.features.split(","))
    if buf.dtype not in ("int8", "uint8") or tuple(buf.shape) != (BYTE_TABLE,) or not 2 <= lanes <= 64 \
            or not {"+avx512vbmi", "+avx512bw"} <= features:
        return None
    b, byte = fe.b, ir.IntType(8)
    full = ir.VectorType(byte, 64)
    idx = b.trunc(index, ir.VectorType(byte, lanes))  # 0..255
    if lanes < 64:
        repeat = ir.Constant(_vector(64), [k % lanes for k in range(64)])
        idx = b.shuffle_vector(idx, ir.Constant(idx.type, None), repeat)
    permute = declare(b.module, "llvm.x86.avx512.vpermi2var.qi.512", full, [full, full, full])
    quarters = [b.load(fe.element_ptr(buf, ir.Constant(ir.IntType(64), 64 * k)), typ=full, align=1) for k in range(4)]
    low, high = b.call(permute, [quarters[0], idx, quarters[1]]), b.call(permute, [quarters[2], idx, quarters[3]])
    out = b.select(b.icmp_signed("<", idx, ir.Constant(full, None)), high, low)  # index >= 128: the upper half
    if lanes < 64:
        out = b.shuffle_vector(out, ir.Constant(full, None), ir.Constant(_vector(lanes), list(range(lanes))))
    return fe.from_mem(buf.dtype, out)


def fastest_equivalent(intrinsic: TensorIntrinsic, target) -> TensorIntrinsic:
    """The intrinsic `target`'s features lower in the fewest instructions among those computing exactly what
    `intrinsic` does on the same operands (lanes, depth, dtypes; exact for at least its weights): a kernel scheduled
    for AVX2 (the multi-ISA target's graph) compiled for its AVX-512 variant takes vpdpbusd for the vpmaddwd
    lowering. `intrinsic` itself when none is faster (or it is strided)."""
    if intrinsic.strided or intrinsic.weight_dtype is None:
        return intrinsic

    def same(other: TensorIntrinsic) -> bool:
        exact_enough = other.weight_limit is None or (intrinsic.weight_limit is not None
                                                      and other.weight_limit >= intrinsic.weight_limit)
        return (not other.strided and other.arch == intrinsic.arch and other.lanes == intrinsic.lanes
                and other.depth == intrinsic.depth and other.declaration.dtype == intrinsic.declaration.dtype
                and [t.dtype for t in other.inputs] == [t.dtype for t in intrinsic.inputs] and exact_enough)

    faster = [i for i in intrinsics_for(target, same) if i.instructions < intrinsic.instructions]
    return min(faster, key=lambda i: (i.instructions, i.name)) if faster else intrinsic


def emit_intrinsic_call(fe, call: IntrinsicCall) -> None:
    """Codegen of an IntrinsicCall statement: its lowering on pointers to each operand region's first element."""
    intrinsic = fastest_equivalent(get_intrinsic(call.name), fe.ctx.target)
    if not intrinsic.available_on(fe.ctx.target):
        raise CodegenError(f"kernel {fe.kernel_name}: tensor intrinsic {intrinsic.name} needs {intrinsic.arch} with "
                           f"{', '.join('+' + f for f in sorted(intrinsic.features))}; target {fe.ctx.target.name} "
                           f"has {fe.ctx.target.features}")
    pointers = [fe.element_ptr(o.buffer, fe.emit_index(o.index)) for o in call.operands]
    emit = LOWERINGS[intrinsic.name]
    if intrinsic.strided:
        emit(fe.b, pointers, call.strides)
    else:
        emit(fe.b, pointers)
