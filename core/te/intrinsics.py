"""The tensor intrinsics tensorize matches, as data: each a hardware instruction's compute, operand dtypes and the target features it needs.

An intrinsic is declared once, as a small compute over placeholders (what one instruction computes:
`c[16] += sum_{k<4} int32(a[k]) * int32(b[16, 4])`, or a conversion `c[16] = bfloat16(a[16])`); tensorize
(core/te/tensorize.py) checks a loop nest against it and replaces the nest with an IntrinsicCall naming it.
What codegen emits for each name, its lowering, is core/codegen/intrinsics*.py's. Chosen by features
(`intrinsics_for(target)`), never by name:

- x86 AVX-512-VNNI `vpdpbusd` on zmm (16 lanes) and AVX-VNNI on ymm (8 lanes): u8 x s8, exact int32; AVX-512 VNNI's
  `vpdpwssd` on ymm for int16 data.
- x86 AVX2 (8 lanes): exact u8 x s8 (both widened per call) or s16 x s8 two deep (`vpmaddwd`); weights within +-64
  (ONNX Runtime's reduce_range) also `vpmaddubsw` + `vpmaddwd` (whose int16 pair sums saturate beyond that).
- AArch64 `sdot` (s8 x s8) and `udot` (u8 x u8) with +dotprod (4 lanes of a 128-bit register).
- CUDA `dp4a` (s8 x s8 and u8 x s8, one lane: each GPU thread owns its accumulator; sm_61 and later).
- x86 AVX-512-BF16: `vdpbf16ps` (c[16] += sum_{k<2} f32(a[k]) * f32(b[16, 2])) and `vcvtneps2bf16` (c[16] = bf16(a[16])).
- CUDA tensor cores' `mma.sync` m16n8k16 (sm_80 and later), declared per thread: c[2, 2] += sum_{k<16}
  f32(a[2, 16]) * f32(b[16, 2]), executed by a whole warp together (core/codegen/intrinsics_mma.py says how).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from ..errors import ScheduleError
from ..tir.expr import cast
from . import tensor as te
from .tensor import ComputeOp, Reduce, Tensor


@dataclass(frozen=True, eq=False)
class TensorIntrinsic:
    """`declaration`: the compute (one Reduce-sum stage, or one elementwise stage, over `inputs`); `features`: LLVM
    target features it needs (all of them), on `arch`. Codegen lowers an IntrinsicCall of `name` on pointers to
    the first element of the output region and of each input's, in `inputs` order."""

    name: str
    declaration: Tensor
    inputs: tuple[Tensor, ...]
    arch: str
    features: frozenset[str]
    instructions: int = 1  # machine instructions per call, about: ranks intrinsics of equal width
    weight_limit: Optional[int] = None  # exact only for weights with |w| <= this (None: any weight)
    # Each operand's dimensions but the innermost (always unit stride) may have any constant stride: the matcher
    # measures them and the lowering takes them too, one tuple of element strides per operand.
    strided: bool = False
    min_sm: int = 0  # nvptx64: the lowest GPU architecture (sm_XX) that has the instruction
    # Executed by a whole warp together (mma.sync): never under a condition that only some of its threads take.
    warp_collective: bool = False

    def admits(self, weights) -> bool:
        """Whether this intrinsic is exact for these (constant) weights."""
        return self.weight_limit is None or int(abs(weights.astype("int32")).max(initial=0)) <= self.weight_limit

    @property
    def op(self) -> ComputeOp:
        return self.declaration.op  # type: ignore[return-value]

    @property
    def weight_dtype(self) -> Optional[str]:
        """The second operand's dtype (a dot product's weights); None for a conversion."""
        return self.inputs[1].dtype if len(self.inputs) > 1 else None

    @property
    def lanes(self) -> int:
        """Output elements per call."""
        count = 1
        for d in self.declaration.shape:
            count *= d
        return count

    @property
    def depth(self) -> int:
        """Reduction elements per output element and call."""
        count = 1
        for iv in self.op.reduce_axis:
            count *= iv.extent
        return count

    def available_on(self, target) -> bool:
        have = {f[1:] for f in target.features.split(",") if f.startswith("+")}
        sm_ok = not self.min_sm or target.sm >= self.min_sm
        return target.arch == self.arch and self.features <= have and sm_ok


_INTRINSICS: dict[str, TensorIntrinsic] = {}


def register_intrinsic(intrinsic: TensorIntrinsic) -> TensorIntrinsic:
    if intrinsic.name in _INTRINSICS:
        raise ValueError(f"tensor intrinsic {intrinsic.name} registered twice")
    op = intrinsic.op
    if not isinstance(op, ComputeOp) or (isinstance(op.body, Reduce) and op.body.combiner != "sum"):
        raise ValueError(f"tensor intrinsic {intrinsic.name}: the declaration must be one sum reduction or one "
                         "elementwise stage (a conversion)")
    _INTRINSICS[intrinsic.name] = intrinsic
    return intrinsic


def get_intrinsic(name: str) -> TensorIntrinsic:
    try:
        return _INTRINSICS[name]
    except KeyError:
        raise ScheduleError(f"no tensor intrinsic named {name!r} (known: {', '.join(sorted(_INTRINSICS))})") from None


def intrinsic_names() -> list[str]:
    """Every declared intrinsic's name (each has a lowering in codegen)."""
    return sorted(_INTRINSICS)


def intrinsics_for(target, predicate: Callable[[TensorIntrinsic], bool] = lambda i: True) -> list[TensorIntrinsic]:
    """The intrinsics `target`'s features allow that `predicate` accepts, most products per instruction first."""
    found = [i for i in _INTRINSICS.values() if i.available_on(target) and predicate(i)]
    return sorted(found, key=lambda i: (-(i.lanes * i.depth) / i.instructions, i.name))


# ---------------------------------------------------------------- 8-bit dot products

DEPTH = 4  # 8-bit products summed into each int32 lane per instruction (vpmaddwd's int16 ones: 2)


def dot_declaration(lanes: int, a_dtype: str, b_dtype: str, name: str,
                    depth: int = DEPTH) -> tuple[te.Tensor, tuple[te.Tensor, ...]]:
    """c[lanes] += sum_{k<depth} int32(a[k]) * int32(b[lanes, depth]) (a: activations shared by every lane; b:
    `depth` weights per lane, lane-major)."""
    a = te.placeholder((depth,), a_dtype, "a")
    b = te.placeholder((lanes, depth), b_dtype, "b")
    k = te.reduce_axis(depth, "k")
    c = te.compute((lanes,), lambda j: te.sum(cast("int32", a[k.var]) * cast("int32", b[j, k.var]), k), name=name)
    return c, (a, b)


def _declare_dot(name: str, lanes: int, a_dtype: str, b_dtype: str, arch: str, features: set[str],
                 instructions: int = 1, weight_limit: int | None = None, depth: int = DEPTH) -> None:
    declaration, inputs = dot_declaration(lanes, a_dtype, b_dtype, name, depth)
    register_intrinsic(TensorIntrinsic(name, declaration, inputs, arch, frozenset(features), instructions,
                                       weight_limit))


_declare_dot("x86_vnni_u8s8_16x4", 16, "uint8", "int8", "x86_64", {"avx512vnni", "avx512f"})
_declare_dot("x86_avxvnni_u8s8_8x4", 8, "uint8", "int8", "x86_64", {"avxvnni"})
# vpdpbusd on ymm in its EVEX form (AVX-512 VNNI with VL, no AVX-VNNI): the AVX2 8-lane dots' operands, so that
# a multi-ISA library's AVX-512 variant runs kernels scheduled for 8 lanes with one instruction per call.
_declare_dot("x86_avx512vl_vnni_u8s8_8x4", 8, "uint8", "int8", "x86_64", {"avx512vnni", "avx512vl"})
_declare_dot("x86_avx512vl_vnni_s16s8_8x2", 8, "int16", "int8", "x86_64", {"avx512vnni", "avx512vl"}, depth=2)
_declare_dot("x86_avx2_u8s8_8x4", 8, "uint8", "int8", "x86_64", {"avx2"}, instructions=8)
_declare_dot("x86_avx2_s16s8_8x2", 8, "int16", "int8", "x86_64", {"avx2"}, instructions=2, depth=2)
_declare_dot("x86_avx2_u8s7_8x4", 8, "uint8", "int8", "x86_64", {"avx2"}, instructions=3, weight_limit=64)
_declare_dot("aarch64_sdot_s8s8_4x4", 4, "int8", "int8", "aarch64", {"dotprod"})
_declare_dot("aarch64_udot_u8u8_4x4", 4, "uint8", "uint8", "aarch64", {"dotprod"})
_declare_dot("cuda_dp4a_s8s8_1x4", 1, "int8", "int8", "nvptx64", set())
_declare_dot("cuda_dp4a_u8s8_1x4", 1, "uint8", "int8", "nvptx64", set())

# ---------------------------------------------------------------- AVX-512-BF16

BF16_LANES, BF16_PAIR = 16, 2
BF16_FEATURES = frozenset({"avx512bf16", "avx512f"})


def _bf16_dot_declaration():
    a = te.placeholder((BF16_PAIR,), "bfloat16", "a")
    w = te.placeholder((BF16_LANES, BF16_PAIR), "bfloat16", "b")
    k = te.reduce_axis(BF16_PAIR, "k")
    c = te.compute((BF16_LANES,), lambda j: te.sum(cast("float32", a[k.var]) * cast("float32", w[j, k.var]), k),
                   name="x86_avx512bf16_dot_16x2")
    return c, (a, w)


def _bf16_convert_declaration():
    a = te.placeholder((BF16_LANES,), "float32", "a")
    c = te.compute((BF16_LANES,), lambda j: cast("bfloat16", a[j]), name="x86_avx512bf16_cvt_16")
    return c, (a,)


for _declare in (_bf16_dot_declaration, _bf16_convert_declaration):
    _declaration, _inputs = _declare()
    register_intrinsic(TensorIntrinsic(_declaration.op.name, _declaration, _inputs, "x86_64", BF16_FEATURES))

# ---------------------------------------------------------------- CUDA tensor cores

MMA_F16 = "cuda_mma_f16f32_m16n8k16"
MMA_ROWS, MMA_COLUMNS, MMA_DEPTH = 2, 2, 16  # one thread's share of a 16 x 8 x 16 product


def mma_declaration() -> tuple[te.Tensor, tuple[te.Tensor, ...]]:
    a = te.placeholder((MMA_ROWS, MMA_DEPTH), "float16", "a")
    b = te.placeholder((MMA_DEPTH, MMA_COLUMNS), "float16", "b")
    k = te.reduce_axis(MMA_DEPTH, "k")
    c = te.compute((MMA_ROWS, MMA_COLUMNS),
                   lambda h, e: te.sum(cast("float32", a[h, k.var]) * cast("float32", b[k.var, e]), k), name=MMA_F16)
    return c, (a, b)


_declaration, _inputs = mma_declaration()
register_intrinsic(TensorIntrinsic(MMA_F16, _declaration, _inputs, "nvptx64", frozenset(), strided=True, min_sm=80,
                                   warp_collective=True))
