"""Kiln's tensor-core GEMM as NVPTX: the tile plan of kernels/gemm_plan/gemm_mma.py emitted as one LLVM kernel
(cp.async multi-stage pipeline into swizzled shared memory, ldmatrix fragments, mma.sync m16n8k16 with float32
sums, the fused epilogue at the accumulators) plus, for split-K, a kernel that sums the parts and applies it.

Kernel parameters follow PrimFunc's order: inputs (a, b, then bias and residual when the epilogue has them),
the output c, then the split-K workspace (float32 [split_k, m, n]).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

from llvmlite import ir

from ..kernels.gemm_plan import gemm_mma as plan
from ..kernels.gemm_plan.gemm_mma import GemmConfig, GemmProblem
from ..target import Target
from . import gpu_math
from .arith import declare
from .llvm_types import F16, F32, I32, I64, PTR
from .nvptx_target import SHARED, LaunchConfig, target_machine

GLOBAL = 1
I16 = ir.IntType(16)
REDUCE_THREADS = 256
_ELEM = {"float16": F16, "bfloat16": I16, "float32": F32}  # bfloat16: its bits (llvmlite has no bfloat)


class Index:
    """An i32 LLVM value with Python's integer operators, so the plan's index functions build IR."""

    def __init__(self, b: ir.IRBuilder, value: ir.Value):
        self.b, self.v = b, value

    def _of(self, x) -> ir.Value:
        return x.v if isinstance(x, Index) else ir.Constant(I32, int(x))

    def _op(self, name: str, x, swap: bool = False) -> "Index":
        lhs, rhs = (self._of(x), self.v) if swap else (self.v, self._of(x))
        return Index(self.b, getattr(self.b, name)(lhs, rhs))

    __add__ = lambda s, x: s._op("add", x)  # noqa: E731
    __radd__ = __add__
    __mul__ = lambda s, x: s._op("mul", x)  # noqa: E731
    __rmul__ = __mul__
    __sub__ = lambda s, x: s._op("sub", x)  # noqa: E731
    __rsub__ = lambda s, x: s._op("sub", x, swap=True)  # noqa: E731
    __floordiv__ = lambda s, x: s._op("udiv", x)  # noqa: E731
    __mod__ = lambda s, x: s._op("urem", x)  # noqa: E731
    __xor__ = lambda s, x: s._op("xor", x)  # noqa: E731
    __and__ = lambda s, x: s._op("and_", x)  # noqa: E731
    __lshift__ = lambda s, x: s._op("shl", x)  # noqa: E731
    __rshift__ = lambda s, x: s._op("lshr", x)  # noqa: E731

    def minimum(self, x) -> "Index":
        return Index(self.b, self.b.select(self.lt(x), self.v, self._of(x)))

    def lt(self, x) -> ir.Value:
        return self.b.icmp_unsigned("<", self.v, self._of(x))

    def below(self, x) -> "Index":
        """1 when 0 <= self < x as signed values (unsigned <: a negative wraps past x), else 0."""
        return Index(self.b, self.b.zext(self.lt(x), I32))

    def nonzero(self) -> ir.Value:
        return self.b.icmp_unsigned("!=", self.v, ir.Constant(I32, 0))

    def wide(self) -> ir.Value:
        return self.b.zext(self.v, I64)


def _asm(b: ir.IRBuilder, ret: ir.Type, text: str, constraints: str, args, side_effect: bool = True):
    fn = ir.FunctionType(ret, [a.type for a in args])
    return b.call(ir.InlineAsm(fn, text, constraints, side_effect=side_effect), list(args))


def _sreg(b: ir.IRBuilder, name: str) -> Index:
    return Index(b, b.call(declare(b.module, f"llvm.nvvm.read.ptx.sreg.{name}", I32, []), []))


def _element(b: ir.IRBuilder, base: ir.Value, index: ir.Value, dtype: str) -> ir.Value:
    return b.gep(base, [index], inbounds=True, source_etype=_ELEM[dtype])


def _widen(b: ir.IRBuilder, values: list[ir.Value], dtype: str) -> list[ir.Value]:
    if dtype == "float16":
        return [b.fpext(v, F32) for v in values]
    if dtype == "bfloat16":
        return [b.bitcast(b.shl(b.zext(v, I32), ir.Constant(I32, 16)), F32) for v in values]
    return values


def _load_pair(b: ir.IRBuilder, base: ir.Value, index: ir.Value, dtype: str, stride: int = 1) -> list[ir.Value]:
    """Two elements `stride` apart as float32 (adjacent: an aligned 2-wide vector load)."""
    if stride != 1:
        second = b.add(index, ir.Constant(I64, stride))
        return _widen(b, [b.load(_element(b, base, i, dtype), typ=_ELEM[dtype]) for i in (index, second)], dtype)
    vec = b.load(_element(b, base, index, dtype), typ=ir.VectorType(_ELEM[dtype], 2), align=2 * (4 if dtype ==
                                                                                                    "float32" else 2))
    return _widen(b, [b.extract_element(vec, ir.Constant(I32, e)) for e in (0, 1)], dtype)


def _narrow(b: ir.IRBuilder, x: ir.Value, dtype: str) -> ir.Value:
    """A float32 value as `dtype` (bfloat16: its bits)."""
    if dtype == "float16":
        return b.fptrunc(x, F16)
    return _to_bfloat16(b, x) if dtype == "bfloat16" else x


def _to_bfloat16(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """Round to nearest even, as cvt.rn.bf16.f32 (NaN is not produced by these kernels' finite sums)."""
    bits = b.bitcast(x, I32)
    odd = b.and_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 1))
    rounded = b.add(bits, b.add(ir.Constant(I32, 0x7FFF), odd))
    return b.trunc(b.lshr(rounded, ir.Constant(I32, 16)), I16)


def _store_pair(b: ir.IRBuilder, base: ir.Value, index: ir.Value, dtype: str, values: list[ir.Value],
                stride: int = 1) -> None:
    values = [_narrow(b, v, dtype) for v in values]
    if stride != 1:
        for i, v in zip((index, b.add(index, ir.Constant(I64, stride))), values):
            b.store(v, _element(b, base, i, dtype))
        return
    vec = ir.Constant(ir.VectorType(_ELEM[dtype], 2), ir.Undefined)
    for e, v in enumerate(values):
        vec = b.insert_element(vec, v, ir.Constant(I32, e))
    b.store(vec, _element(b, base, index, dtype), align=2 * (4 if dtype == "float32" else 2))


def _activation(b: ir.IRBuilder, step: str, x: ir.Value) -> ir.Value:
    one = ir.Constant(F32, 1.0)
    if step in ("relu", "relu6"):
        x = b.select(b.fcmp_ordered(">", x, ir.Constant(F32, 0.0)), x, ir.Constant(F32, 0.0))
        six = ir.Constant(F32, 6.0)
        return x if step == "relu" else b.select(b.fcmp_ordered("<", x, six), x, six)
    if step == "sigmoid":
        return b.fdiv(one, b.fadd(one, gpu_math.intrinsic(b, "exp", b.fneg(x))))
    # gelu (ONNX's erf form): x/2 (1 + erf(x / sqrt 2))
    erf = gpu_math.intrinsic(b, "erf", b.fmul(x, ir.Constant(F32, 1 / math.sqrt(2.0))))
    return b.fmul(b.fmul(x, ir.Constant(F32, 0.5)), b.fadd(one, erf))


def _epilogue(b: ir.IRBuilder, problem: GemmProblem, params: dict, row: Index, col: Index,
              values: list[ir.Value]) -> list[ir.Value]:
    """The problem's epilogue steps on the two sums of columns col, col + 1 of `row`, in order."""
    for step in problem.epilogue:
        if step in ("bias", "residual"):
            index = col.wide() if step == "bias" else plan.output_index(problem, row, col).wide()
            extra = _load_pair(b, params[step], index, problem.bias_stored if step == "bias" else problem.extras_dtype,
                               1 if step == "bias" else plan.column_stride(problem))
            values = [b.fadd(v, e) for v, e in zip(values, extra)]
        else:
            values = [_activation(b, step, v) for v in values]
    return values


def _guarded(b: ir.IRBuilder, cond: ir.Value, body: Callable[[], None]) -> None:
    with b.if_then(cond):
        body()


@dataclass(frozen=True)
class MmaKind:
    """What each mma.sync multiplies and where its sums go, when not the problem's float16/bfloat16 m16n8k16 with
    float32 sums and its float epilogue (the int8 kernel: core/codegen/mma_gemm_int8.py): the instruction (its four
    A registers and two B registers as ldmatrix.x4 gives them), the accumulator type and `store(row, col, pair,
    inside, tile_n)`, which applies the epilogue to the sums of columns col, col + 1 of `row` and stores them where
    `inside` (an i1: the pair lies within C); every row tile of the warp's n tile `tile_n` has the same columns, and
    the stores are emitted in straight-line code, so what the first store of a tile_n loads unguarded can serve the
    others."""

    instruction: str
    accumulator: ir.Type
    store: Callable[[Index, Index, list, ir.Value, int], None]


@dataclass
class _Kernel:
    b: ir.IRBuilder
    cfg: GemmConfig
    problem: GemmProblem
    params: dict
    smem: Index  # the shared-window address of the stage buffers
    kind: Optional[MmaKind] = None

    def stage_base(self, operand: str, stage: Index) -> Index:
        a_bytes = self.cfg.a_stage_chunks * 16
        if operand == "a":
            return stage * a_bytes + self.smem
        return stage * (self.cfg.b_stage_chunks * 16) + self.smem + self.cfg.stages * a_bytes

    def copy_slice(self, tid: Index, m0: Index, n0: Index, k_slice: Index, stage: Index, gather: bool = True) -> None:
        """cp.async of one block_k slice of A and B into `stage`; chunks past the matrix edges are zero-filled
        (source size 0, its address clamped to the matrix start). A gathered A is loaded and stored at once
        (unless `gather` is off: the mainloop splits its loads from its stores)."""
        cfg, p, b = self.cfg, self.problem, self.b
        k0 = k_slice * cfg.block_k
        for operand, per_stage, cpr in (("a", cfg.a_stage_chunks, cfg.a_chunks_per_row),
                                        ("b", cfg.b_stage_chunks, plan.b_chunks_per_row(cfg, p))):
            if operand == "a" and p.gathered:
                if gather:
                    self.store_a(self.gather_a(tid, m0, k_slice, 1), stage)
                continue
            base = self.stage_base(operand, stage)
            chunk_of = plan.copy_a_chunk if operand == "a" else plan.copy_b_chunk
            for it in range(per_stage // cfg.threads):
                row, chunk = chunk_of(cfg, tid, it, p)
                offset, inside = plan.copy_source(p, operand, row, chunk, m0, n0, k0)
                inside = inside.nonzero()
                offset = b.select(inside, offset.v, ir.Constant(I32, 0))
                dst = base + plan.swizzle(row, chunk, cpr) * 16
                if operand == "a" and p.a_stored == "float32":
                    self.convert_chunk(offset, inside, dst)
                    continue
                src = b.addrspacecast(_element(b, self.params[operand], b.zext(offset, I64), p.dtype),
                                      ir.PointerType(addrspace=GLOBAL))
                size = b.select(inside, ir.Constant(I32, 16), ir.Constant(I32, 0))
                _asm(b, ir.VoidType(), "cp.async.cg.shared.global [$0], [$1], 16, $2;", "r,l,r,~{memory}",
                     [dst.v, src, size])

    def gather_a(self, tid: Index, m0: Index, k_slice: Index, valid) -> list[tuple[Index, ir.Value]]:
        """The chunks of a gathered A slice loaded element by element into registers, each as (the chunk's
        (row, chunk) swizzled slot, its 8 values as 4 x i32); zeros outside the input or where `valid` is 0."""
        cfg, p, b = self.cfg, self.problem, self.b
        k0, chunks = k_slice * cfg.block_k, []
        for it in range(cfg.a_stage_chunks // cfg.threads):
            row, chunk = plan.copy_a_chunk(cfg, tid, it, p)
            values = []
            for e in range(plan.CHUNK):
                offset, inside = plan.gather_source(p, row, chunk, m0, k0, e)
                inside = (inside * valid).nonzero()
                offset = b.select(inside, offset.v, ir.Constant(I32, 0))
                x = b.load(_element(b, self.params["a"], b.zext(offset, I64), p.a_stored), typ=_ELEM[p.a_stored])
                x = b.select(inside, x, ir.Constant(_ELEM[p.a_stored], 0))
                values.append(_narrow(b, x, p.dtype) if p.a_stored == "float32" else x)
            vec = ir.Constant(ir.VectorType(_ELEM[p.dtype], 8), ir.Undefined)
            for e, v in enumerate(values):
                vec = b.insert_element(vec, v, ir.Constant(I32, e))
            chunks.append((plan.swizzle(row, chunk, cfg.a_chunks_per_row), b.bitcast(vec, ir.VectorType(I32, 4))))
        return chunks

    def store_a(self, chunks: list[tuple[Index, ir.Value]], stage: Index) -> None:
        base = self.stage_base("a", stage)
        for slot, vec in chunks:
            self.b.store(vec, self.b.inttoptr((base + slot * 16).v, ir.PointerType(addrspace=SHARED)), align=16)

    def convert_chunk(self, offset: ir.Value, inside: ir.Value, dst: Index) -> None:
        """Eight float32 of A rounded to the operand dtype and stored as one 16-byte chunk (zeros outside A): a
        synchronous copy through registers, done before the barrier that publishes the stage like cp.async's."""
        b, dtype = self.b, self.problem.dtype
        vec8 = ir.VectorType(F32, 8)
        loaded = b.load(_element(b, self.params["a"], b.zext(offset, I64), "float32"), typ=vec8, align=16)
        values = b.select(inside, loaded, ir.Constant(vec8, [0.0] * 8))
        if dtype == "float16":
            chunk = b.fptrunc(values, ir.VectorType(F16, 8))
        else:
            chunk = ir.Constant(ir.VectorType(I16, 8), ir.Undefined)
            for e in range(8):
                bits = _to_bfloat16(b, b.extract_element(values, ir.Constant(I32, e)))
                chunk = b.insert_element(chunk, bits, ir.Constant(I32, e))
        shared = b.inttoptr(dst.v, ir.PointerType(addrspace=SHARED))
        b.store(b.bitcast(chunk, ir.VectorType(I32, 4)), shared, align=16)

    def ldmatrix(self, address: Index, trans: bool) -> list[ir.Value]:
        text = f"ldmatrix.sync.aligned.m8n8.x4{'.trans' if trans else ''}.shared.b16 {{$0, $1, $2, $3}}, [$4];"
        out = _asm(self.b, ir.LiteralStructType([I32] * 4), text, "=r,=r,=r,=r,r,~{memory}", [address.v])
        return [self.b.extract_value(out, r) for r in range(4)]

    def ldmatrix_b(self, stage: Index, warp: Index, lane: Index, pair: int, kk: int) -> list[ir.Value]:
        row, chunk, trans = plan.b_fragment_address(self.cfg, self.problem, warp, lane, pair, kk)
        cpr = plan.b_chunks_per_row(self.cfg, self.problem)
        return self.ldmatrix(self.stage_base("b", stage) + plan.swizzle(row, chunk, cpr) * 16, trans=trans)

    def mma(self, a: list[ir.Value], b_frag: list[ir.Value], acc: list[ir.Value]) -> list[ir.Value]:
        if self.kind is None:
            kind = "f16" if self.problem.dtype == "float16" else "bf16"
            text, acc_type = f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32", F32
        else:
            text, acc_type = self.kind.instruction, self.kind.accumulator
        reg = "f" if acc_type == F32 else "r"
        out = _asm(self.b, ir.LiteralStructType([acc_type] * 4),
                   f"{text} {{$0, $1, $2, $3}}, {{$4, $5, $6, $7}}, {{$8, $9}}, {{$10, $11, $12, $13}};",
                   f"={reg},={reg},={reg},={reg},r,r,r,r,r,r,0,1,2,3", [*a, *b_frag, *acc], side_effect=False)
        return [self.b.extract_value(out, r) for r in range(4)]


def _barrier(b: ir.IRBuilder) -> None:
    fn = declare(b.module, "llvm.nvvm.barrier0", ir.VoidType(), [])
    fn.attributes.add("convergent")
    b.call(fn, [])


def _kernel_function(module: ir.Module, name: str, names: list[str]) -> tuple[ir.Function, dict]:
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR] * len(names)), name)
    fn.calling_convention = "ptx_kernel"
    fn.attributes.add("nounwind")
    for arg, param in zip(fn.args, names):
        arg.name = param
        arg.add_attribute("noalias")
    return fn, dict(zip(names, fn.args))


def param_names(problem: GemmProblem, cfg: GemmConfig) -> list[str]:
    extras = [s for s in ("bias", "residual") if s in problem.epilogue]
    return ["a", "b", *extras, "c", *(["workspace"] if cfg.split_k > 1 else [])]


def dynamic_shared(cfg: GemmConfig) -> int:
    """The bytes a launch passes as dynamic shared memory: the stage buffers when static ones cannot hold them."""
    return cfg.shared_bytes if cfg.shared_bytes > plan.STATIC_SHARED_BYTES else 0


def emit_main_kernel(module: ir.Module, name: str, problem: GemmProblem, cfg: GemmConfig,
                     emit_body: Optional[Callable] = None) -> LaunchConfig:
    """The block-tile kernel: the pipelined mainloop, then the epilogue (or, split, the float32 part); `emit_body`
    (b, params, problem, cfg, name) writes them: mma.sync's (the default) or wgmma_gemm's."""
    fn, params = _kernel_function(module, name, param_names(problem, cfg))
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    (emit_body or emit_gemm_body)(b, params, problem, cfg, name)
    b.ret_void()
    return LaunchConfig(plan.grid(cfg, problem), (cfg.threads, 1, 1), cfg.shared_bytes, dynamic_shared(cfg))


def emit_gemm_body(b: ir.IRBuilder, params: dict, problem: GemmProblem, cfg: GemmConfig, name: str,
                   kind: Optional[MmaKind] = None) -> None:
    """The main kernel's code at `b` (a kernel function's entry, launched on plan.grid x cfg.threads), `params`
    the pointers by parameter name; it ends at a block that falls through (the caller returns). `kind`: another
    instruction, accumulator and epilogue (not split along k)."""
    module, fn = b.module, b.function
    if dynamic_shared(cfg):  # beyond the static 48 KiB: `.extern .shared`, sized by the launch
        tiles = ir.GlobalVariable(module, ir.ArrayType(ir.IntType(8), 0), f"{name}_tiles", addrspace=SHARED)
        tiles.linkage, tiles.align = "external", 128
    else:
        array = ir.ArrayType(ir.IntType(8), cfg.shared_bytes)
        tiles = ir.GlobalVariable(module, array, f"{name}.tiles", addrspace=SHARED)
        tiles.linkage, tiles.initializer, tiles.align = "internal", ir.Constant(array, ir.Undefined), 128
    k = _Kernel(b, cfg, problem, params, Index(b, b.ptrtoint(tiles, I32)), kind)
    tid, bx, by, part = (_sreg(b, s) for s in ("tid.x", "ctaid.x", "ctaid.y", "ctaid.z"))
    m_block, n_block = plan.block_tile(cfg, problem, bx, by)
    warp, lane = tid // plan.WARP, tid % plan.WARP
    m0, n0 = m_block * cfg.block_m, n_block * cfg.block_n
    slices = -(-problem.k // cfg.block_k)
    per = -(-slices // cfg.split_k)
    first = part * per
    remaining = Index(b, b.sub(ir.Constant(I32, slices), b.select(first.lt(slices), first.v, ir.Constant(I32, slices))))
    count = Index(b, b.select(remaining.lt(per), remaining.v, ir.Constant(I32, per)))
    commit = lambda: _asm(b, ir.VoidType(), "cp.async.commit_group;", "~{memory}", [])  # noqa: E731

    for s in range(cfg.stages - 1):  # the prologue: stages - 1 slices in flight (an empty group past the end)
        _guarded(b, Index(b, ir.Constant(I32, s)).lt(count),
                 lambda s=s: k.copy_slice(tid, m0, n0, first + s, Index(b, ir.Constant(I32, s))))
        commit()

    acc_type = F32 if kind is None else kind.accumulator
    zero = ir.Constant(acc_type, 0.0 if acc_type == F32 else 0)
    tiles_mn = [(tm, tn) for tm in range(cfg.mi) for tn in range(cfg.ni)]
    entry, loop, done = b.block, fn.append_basic_block("mainloop"), fn.append_basic_block("epilogue")
    b.cbranch(b.icmp_unsigned(">", count.v, ir.Constant(I32, 0)), loop, done)
    b.position_at_end(loop)
    kt_phi = b.phi(I32, "kt")
    acc_phis = {t: [b.phi(acc_type) for _ in range(4)] for t in tiles_mn}
    kt = Index(b, kt_phi)
    _asm(b, ir.VoidType(), f"cp.async.wait_group {cfg.stages - 2};", "~{memory}", [])
    _barrier(b)  # slice kt is visible to all, and every warp is done with the stage refilled next
    ahead = kt + (cfg.stages - 1)
    if problem.gathered:  # A's loads are issued now and stored after the mma below, which hide their latency
        pending = k.gather_a(tid, m0, first + ahead, ahead.below(count))
    _guarded(b, ahead.lt(count), lambda: k.copy_slice(tid, m0, n0, first + ahead, ahead % cfg.stages, gather=False))
    commit()
    stage = kt % cfg.stages
    acc = {t: list(v) for t, v in acc_phis.items()}
    for kk in range(cfg.block_k // plan.MMA_K):
        a_frags = [k.ldmatrix(k.stage_base("a", stage) + plan.swizzle(
            *plan.ldmatrix_a(cfg, warp, lane, tm, kk), cfg.a_chunks_per_row) * 16, trans=False) for tm in range(cfg.mi)]
        b_frags = [k.ldmatrix_b(stage, warp, lane, pair, kk) for pair in range(cfg.ni // 2)]
        for tm, tn in tiles_mn:
            acc[tm, tn] = k.mma(a_frags[tm], b_frags[tn // 2][2 * (tn % 2):2 * (tn % 2) + 2], acc[tm, tn])
    if problem.gathered:  # into the stage every warp finished reading at kt - 1 (the barrier above)
        k.store_a(pending, ahead % cfg.stages)
    next_kt = kt + 1
    latch = b.block
    b.cbranch(next_kt.lt(count), loop, done)
    kt_phi.add_incoming(ir.Constant(I32, 0), entry)
    kt_phi.add_incoming(next_kt.v, latch)
    for t in tiles_mn:
        for slot in range(4):
            acc_phis[t][slot].add_incoming(zero, entry)
            acc_phis[t][slot].add_incoming(acc[t][slot], latch)

    b.position_at_end(done)
    sums = {t: [b.phi(acc_type) for _ in range(4)] for t in tiles_mn}
    for t in tiles_mn:
        for slot in range(4):
            sums[t][slot].add_incoming(zero, entry)
            sums[t][slot].add_incoming(acc[t][slot], latch)
    _asm(b, ir.VoidType(), "cp.async.wait_group 0;", "~{memory}", [])
    for (tm, tn), values in sums.items():
        for half in (0, 1):  # rows g and g + 8: slots 0, 1 and 2, 3 (two adjacent columns each)
            row, col = plan.accumulator_position(cfg, warp, lane, tm, tn, 2 * half)
            g_row, g_col = m0 + row, n0 + col
            pair = list(values[2 * half:2 * half + 2])

            def store(g_row=g_row, g_col=g_col, pair=pair):
                if cfg.split_k > 1:
                    _store_pair(b, params["workspace"], ((part * problem.m + g_row) * problem.n + g_col).wide(),
                                "float32", pair)
                else:
                    out = _epilogue(b, problem, params, g_row, g_col, pair)
                    _store_pair(b, params["c"], plan.output_index(problem, g_row, g_col).wide(), problem.out_dtype,
                                out, plan.column_stride(problem))

            inside = b.and_(g_row.lt(problem.m), g_col.lt(problem.n))
            if kind is not None:  # it guards its own stores (its loads come before: shared by the row tiles)
                kind.store(g_row, g_col, pair, inside, tn)
            else:
                _guarded(b, inside, store)


def emit_split_reduce(module: ir.Module, name: str, problem: GemmProblem, cfg: GemmConfig) -> LaunchConfig:
    """Sums the split-K parts of two adjacent outputs a thread, then the epilogue."""
    fn, params = _kernel_function(module, name, param_names(problem, cfg))
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    launch = emit_split_reduce_body(b, params, problem, cfg)
    b.ret_void()
    return launch


def emit_split_reduce_body(b: ir.IRBuilder, params: dict, problem: GemmProblem, cfg: GemmConfig) -> LaunchConfig:
    """The split-K reduction's body over `params` (role -> the kernel's argument; a model's kernel has its own
    parameter order) and its launch."""
    pairs = problem.m * problem.n // 2
    index = _sreg(b, "ctaid.x") * REDUCE_THREADS + _sreg(b, "tid.x")

    def body():
        flat = index * 2
        row, col = flat // problem.n, flat % problem.n
        total = [ir.Constant(F32, 0.0)] * 2
        for z in range(cfg.split_k):
            part = _load_pair(b, params["workspace"], (flat + z * problem.m * problem.n).wide(), "float32")
            total = [b.fadd(t, v) for t, v in zip(total, part)]
        _store_pair(b, params["c"], plan.output_index(problem, row, col).wide(), problem.out_dtype,
                    _epilogue(b, problem, params, row, col, total), plan.column_stride(problem))

    _guarded(b, index.lt(pairs), body)
    return LaunchConfig((-(-pairs // REDUCE_THREADS), 1, 1), (REDUCE_THREADS, 1, 1), 0)


@dataclass(frozen=True)
class GemmKernels:
    """The kernels of one GEMM, launched in order with the same arguments (`params`)."""

    problem: GemmProblem
    config: GemmConfig
    ptx: str
    launches: dict  # kernel name -> LaunchConfig, in launch order
    params: tuple[str, ...]

    def param_shapes(self) -> list[tuple[str, tuple[int, ...], str]]:
        """(name, shape, dtype) of each parameter: what the launches take, in order."""
        p, cfg = self.problem, self.config
        a_shape, c_shape = ((p.conv.input_shape, p.conv.output_shape) if p.conv is not None else
                            ((p.m, p.k), (p.m, p.n)))
        shapes = {"a": (a_shape, p.a_stored), "b": (p.b_shape, p.dtype), "bias": ((p.n,), p.bias_stored),
                  "residual": (c_shape, p.extras_dtype), "c": (c_shape, p.out_dtype),
                  "workspace": ((cfg.split_k, p.m, p.n), "float32")}
        return [(name, *shapes[name]) for name in self.params]

    def signature(self, name: str) -> dict:
        """The kernel signature CudaKernelLibrary checks arrays against (every kernel takes all parameters)."""
        return {"name": name, "params": [{"name": n, "shape": list(s), "dtype": d} for n, s, d in self.param_shapes()],
                "num_inputs": self.params.index("c"), "num_outputs": 1}


def build_gemm(problem: GemmProblem, cfg: GemmConfig, target: Target, name: str = "kiln_gemm",
               error: Optional[str] = None) -> GemmKernels:
    """The PTX of `problem` tiled by `cfg` for `target` (O3, through LLVM's NVPTX backend)."""
    error = error or plan.config_error(cfg, problem, plan.shared_limit(target.cpu))
    if error:
        raise ValueError(f"GEMM {problem.m}x{problem.n}x{problem.k} with {cfg}: {error}")
    return gemm_kernels(problem, cfg, target, name)


def gemm_kernels(problem: GemmProblem, cfg, target: Target, name: str,
                 emit_body: Optional[Callable] = None) -> GemmKernels:
    """One GEMM's module, optimized at O3 for `target`: the main kernel (its body by `emit_body`, see
    emit_main_kernel), then (split along K) the reduction; the tile config `cfg` is gemm_mma's or gemm_wgmma's."""
    module = gpu_module(target)
    launches = {name: emit_main_kernel(module, name, problem, cfg, emit_body)}
    if cfg.split_k > 1:
        launches[f"{name}_reduce"] = emit_split_reduce(module, f"{name}_reduce", problem, cfg)
    return GemmKernels(problem, cfg, optimized_ptx(module, target), launches, tuple(param_names(problem, cfg)))


def gpu_module(target: Target) -> ir.Module:
    """An empty LLVM module for `target`'s NVPTX."""
    module = ir.Module(name="kiln_gemm")
    module.triple = target.triple
    module.data_layout = str(target_machine(target).target_data)
    return module


def optimized_ptx(module: ir.Module, target: Target) -> str:
    """`module`'s PTX at O3, through LLVM's NVPTX backend."""
    import llvmlite.binding as llvm

    from .llvm_env import LLVM_LOCK

    with LLVM_LOCK:
        tm = target_machine(target)
        mod = llvm.parse_assembly(str(module))
        mod.verify()
        pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
        pb.getModulePassManager().run(mod, pb)
        return tm.emit_assembly(mod)


__all__ = ["build_gemm", "gemm_kernels", "GemmKernels", "param_names", "dynamic_shared", "emit_main_kernel",
           "emit_gemm_body", "emit_split_reduce", "emit_split_reduce_body", "Index", "MmaKind", "gpu_module",
           "optimized_ptx"]
