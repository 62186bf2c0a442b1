"""Kiln's sm_90 warpgroup GEMM as NVPTX: the tile plan of kernels/gemm_plan/gemm_wgmma.py emitted as one LLVM
kernel (a cp.async stage ring in the 128-byte swizzled layout, wgmma.mma_async m64nNk16 reading A and B through
shared-memory matrix descriptors, float32 sums in registers, mma_gemm's fused epilogue) plus, for split-K,
mma_gemm's reduction kernel.

Architecture: wgmma exists only in the arch-specific PTX target sm_90a (PTX ISA 8.0), which an sm_90 GPU (H100,
H200) runs but no later architecture does. So this kernel's module is always emitted for `.target sm_90a`,
whatever sm_90 target asked for it, and its builder refuses other architectures; the model pipeline
(core/backends/cuda/schedules/gemm_group.py) keeps the mma.sync kernel on `cuda -arch=sm_90` until a GPU session
has validated this one against cuBLAS (tests/core/kernels/test_gpu_gemm_wgmma.py, bench/gpu_session.sh).

Loads: cp.async of 16 bytes a thread by every thread (zero-filled past the edges), then fence.proxy.async so that
wgmma's async-proxy reads see them; not yet TMA (cp.async.bulk.tensor with an mbarrier needs tensor maps encoded
host-side by cuTensorMapEncodeTiled, which the CUDA runtime C does not have yet).
"""
from __future__ import annotations

from dataclasses import replace

from llvmlite import ir

from ..kernels.gemm_plan import gemm_wgmma as plan
from ..kernels.gemm_plan.gemm_mma import GemmProblem, output_index
from ..kernels.gemm_plan.gemm_wgmma import WgmmaConfig
from ..target import Target
from .llvm_types import F32, I32, I64
from .mma_gemm import (GLOBAL, GemmKernels, Index, _asm, _barrier, _element, _epilogue, _guarded, _sreg, _store_pair,
                       dynamic_shared, gemm_kernels)
from .nvptx_target import SHARED

ARCH = "sm_90"
PTX_ARCH, PTX_FEATURES = "sm_90a", "+ptx80"  # wgmma's arch-specific target


def _void(b: ir.IRBuilder, text: str) -> None:
    _asm(b, ir.VoidType(), text, "~{memory}", [])


def _descriptor(b: ir.IRBuilder, words: tuple) -> ir.Value:
    """The 64-bit descriptor from the plan's (low: run-time Index, high: constant) words."""
    low, high = words
    return b.or_(b.zext(low.v, I64), ir.Constant(I64, high << 32))


def _wgmma(b: ir.IRBuilder, problem: GemmProblem, n: int, trans_b: int, a_desc: ir.Value, b_desc: ir.Value,
           acc: list[ir.Value], scale_d: ir.Value) -> list[ir.Value]:
    """One wgmma.mma_async m64nNk16 on the warpgroup's sums: D = A B + (D if scale_d else 0), A K-major, B
    transposed when N-major."""
    kind = "f16" if problem.dtype == "float16" else "bf16"
    regs = len(acc)
    d = ", ".join(f"${i}" for i in range(regs))
    text = ("{\n.reg .pred p;\n"
            f"setp.ne.b32 p, ${regs + 2}, 0;\n"
            f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{kind}.{kind} {{{d}}}, ${regs}, ${regs + 1}, p, 1, 1, 0, "
            f"{trans_b};\n}}")
    constraints = ",".join(["=f"] * regs + ["l", "l", "r"] + [str(i) for i in range(regs)] + ["~{memory}"])
    out = _asm(b, ir.LiteralStructType([F32] * regs), text, constraints, [a_desc, b_desc, scale_d, *acc])
    return [b.extract_value(out, i) for i in range(regs)]


def _retire(b: ir.IRBuilder, acc: list[ir.Value]) -> list[ir.Value]:
    """wgmma.wait_group 0 with the sums passed through it, so nothing reads them before the wgmma wrote them."""
    regs = len(acc)
    constraints = ",".join(["=f"] * regs + [str(i) for i in range(regs)] + ["~{memory}"])
    out = _asm(b, ir.LiteralStructType([F32] * regs), "wgmma.wait_group.sync.aligned 0;", constraints, acc)
    return [b.extract_value(out, i) for i in range(regs)]


def _copy_slice(b: ir.IRBuilder, cfg: WgmmaConfig, problem: GemmProblem, params: dict, base: Index, tid: Index,
                m0: Index, n0: Index, k_slice: Index, stage: Index) -> None:
    """cp.async of one 64-deep slice of A and B into `stage`'s swizzled buffers (chunks past the edges: source
    size 0, address clamped to the matrix start)."""
    k0 = k_slice * plan.BLOCK_K
    for operand in ("a", "b"):
        stage_at = base + plan.stage_base(cfg, operand, stage)
        for it in range(plan.stage_chunks(cfg, operand) // cfg.threads):
            row, chunk = plan.copy_chunk(cfg, problem, operand, tid, it)
            offset, inside = plan.copy_source(problem, operand, row, chunk, m0, n0, k0)
            inside = inside.nonzero()
            offset = b.select(inside, offset.v, ir.Constant(I32, 0))
            dst = stage_at + plan.stage_offset(cfg, problem, operand, row, chunk)
            src = b.addrspacecast(_element(b, params[operand], b.zext(offset, I64), problem.dtype),
                                  ir.PointerType(addrspace=GLOBAL))
            size = b.select(inside, ir.Constant(I32, 16), ir.Constant(I32, 0))
            _asm(b, ir.VoidType(), "cp.async.cg.shared.global [$0], [$1], 16, $2;", "r,l,r,~{memory}",
                 [dst.v, src, size])


def _shared_base(b: ir.IRBuilder, cfg: WgmmaConfig, name: str) -> Index:
    """The stage buffers' shared address, rounded up to a 1024-byte atom (the swizzle pattern's alignment; the
    allocation has an atom of slack, so this holds however the driver places dynamic shared memory)."""
    module = b.module
    if dynamic_shared(cfg):
        tiles = ir.GlobalVariable(module, ir.ArrayType(ir.IntType(8), 0), f"{name}_tiles", addrspace=SHARED)
        tiles.linkage = "external"
    else:
        array = ir.ArrayType(ir.IntType(8), cfg.shared_bytes)
        tiles = ir.GlobalVariable(module, array, f"{name}.tiles", addrspace=SHARED)
        tiles.linkage, tiles.initializer = "internal", ir.Constant(array, ir.Undefined)
    tiles.align = plan.ATOM
    return (Index(b, b.ptrtoint(tiles, I32)) + (plan.ATOM - 1)) & -plan.ATOM


def emit_wgmma_body(b: ir.IRBuilder, params: dict, problem: GemmProblem, cfg: WgmmaConfig, name: str) -> None:
    """The main kernel's code at `b` (a kernel's entry, launched on plan.grid x cfg.threads); it ends at a block
    that falls through (the caller returns)."""
    fn = b.function
    base = _shared_base(b, cfg, name)
    tid, bx, by, part = (_sreg(b, s) for s in ("tid.x", "ctaid.x", "ctaid.y", "ctaid.z"))
    m_block, n_block = plan.block_tile(cfg, problem, bx, by)
    warpgroup, warp, lane = tid // plan.WARPGROUP, tid // 32 % 4, tid % 32
    m0, n0 = m_block * cfg.block_m, n_block * cfg.block_n
    slices = -(-problem.k // plan.BLOCK_K)
    per = -(-slices // cfg.split_k)
    first = part * per
    remaining = Index(b, b.sub(ir.Constant(I32, slices), b.select(first.lt(slices), first.v, ir.Constant(I32, slices))))
    count = remaining.minimum(per)
    copy = lambda ks, st: _copy_slice(b, cfg, problem, params, base, tid, m0, n0, ks, st)  # noqa: E731

    for s in range(cfg.prefetch):  # the prologue: an empty cp.async group past the end keeps the count uniform
        _guarded(b, Index(b, ir.Constant(I32, s)).lt(count), lambda s=s: copy(first + s, Index(b, ir.Constant(I32, s))))
        _void(b, "cp.async.commit_group;")

    # A do-while loop (the plan gives every split-K part at least one slice) whose first wgmma ignores the undefined
    # sums (scale-d 0): no instruction but wgmma defines the accumulators while a wgmma group is in flight, else
    # ptxas serializes the wgmma pipeline (C7515).
    regs = cfg.block_n // 2
    undefined = ir.Constant(F32, ir.Undefined)
    entry, loop, done = b.block, fn.append_basic_block("mainloop"), fn.append_basic_block("epilogue")
    b.branch(loop)
    b.position_at_end(loop)
    kt_phi = b.phi(I32, "kt")
    acc_phis = [[b.phi(F32) for _ in range(regs)] for _ in range(cfg.m_tiles)]
    kt = Index(b, kt_phi)
    _void(b, f"cp.async.wait_group {cfg.prefetch - 1};")
    _void(b, "fence.proxy.async.shared::cta;")  # this thread's cp.async writes, visible to wgmma's async proxy
    _barrier(b)  # slice kt everywhere; every warpgroup retired the wgmma group of the stage refilled next
    ahead = kt + cfg.prefetch
    _guarded(b, ahead.lt(count), lambda: copy(first + ahead, ahead % cfg.stages))
    _void(b, "cp.async.commit_group;")
    stage = kt % cfg.stages
    acc = [list(t) for t in acc_phis]
    _void(b, "wgmma.fence.sync.aligned;")
    for kk in range(plan.BLOCK_K // plan.WGMMA_K):
        b_words, trans_b = plan.b_descriptor(cfg, problem, base, stage, kk)
        b_desc = _descriptor(b, b_words)
        scale_d = b.zext(kt.nonzero(), I32) if kk == 0 else ir.Constant(I32, 1)
        for tile in range(cfg.m_tiles):
            a_desc = _descriptor(b, plan.a_descriptor(cfg, base, stage, warpgroup, tile, kk))
            acc[tile] = _wgmma(b, problem, cfg.block_n, trans_b, a_desc, b_desc, acc[tile], scale_d)
    _void(b, "wgmma.commit_group.sync.aligned;")
    _void(b, f"wgmma.wait_group.sync.aligned {cfg.in_flight};")
    next_kt = kt + 1
    latch = b.block
    b.cbranch(next_kt.lt(count), loop, done)
    kt_phi.add_incoming(ir.Constant(I32, 0), entry)
    kt_phi.add_incoming(next_kt.v, latch)
    for tile in range(cfg.m_tiles):
        for r in range(regs):
            acc_phis[tile][r].add_incoming(undefined, entry)
            acc_phis[tile][r].add_incoming(acc[tile][r], latch)

    b.position_at_end(done)
    flat = _retire(b, [v for tile_sums in acc for v in tile_sums])  # all tiles' sums: at most 128 operands
    sums = [flat[tile * regs:(tile + 1) * regs] for tile in range(cfg.m_tiles)]
    _void(b, "cp.async.wait_group 0;")
    for tile, values in enumerate(sums):
        for r in range(0, regs, 2):  # registers r, r + 1: two adjacent columns of one row
            row, col = plan.accumulator_position(cfg, warpgroup, warp, lane, tile, r)
            g_row, g_col, pair = m0 + row, n0 + col, values[r:r + 2]

            def store(g_row=g_row, g_col=g_col, pair=pair):
                if cfg.split_k > 1:
                    _store_pair(b, params["workspace"], ((part * problem.m + g_row) * problem.n + g_col).wide(),
                                "float32", pair)
                else:
                    _store_pair(b, params["c"], output_index(problem, g_row, g_col).wide(), problem.out_dtype,
                                _epilogue(b, problem, params, g_row, g_col, pair))

            _guarded(b, b.and_(g_row.lt(problem.m), g_col.lt(problem.n)), store)


def build_wgmma_gemm(problem: GemmProblem, cfg: WgmmaConfig, target: Target, name: str = "kiln_wgmma") -> GemmKernels:
    """The PTX (`.target sm_90a`) of `problem` tiled by `cfg` for an sm_90 `target` (O3, LLVM's NVPTX backend)."""
    if target.cpu not in (ARCH, PTX_ARCH):
        raise ValueError(f"wgmma GEMM: {target.cpu} has no wgmma (sm_90 only: `cuda -arch=sm_90`)")
    error = plan.config_error(cfg, problem)
    if error:
        raise ValueError(f"wgmma GEMM {problem.m}x{problem.n}x{problem.k} with {cfg}: {error}")
    return gemm_kernels(problem, cfg, replace(target, cpu=PTX_ARCH, features=PTX_FEATURES), name, emit_wgmma_body)


__all__ = ["build_wgmma_gemm", "emit_wgmma_body", "ARCH", "PTX_ARCH"]
