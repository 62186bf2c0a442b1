"""Kiln's int8 tensor-core GEMM as NVPTX: the float kernel of mma_gemm.py on the problem's 16-bit view
(kernels/gemm_plan/gemm_mma_int8.py: the same cp.async stages, swizzle and ldmatrix.x4 addresses) with
mma.sync m16n8k32 s8/u8 x s8 -> s32, int32 accumulators and the integer epilogue at each pair of sums: the zero
points' correction, an int32 bias, and Requantize to uint8 / int8 (MLAS's order) or the int32 sums as they are.

Kernel parameters: plan.param_roles's order (a, b, correction, [zero], [bias], [multiplier], c).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from llvmlite import ir

from ..kernels.gemm_plan import gemm_mma_int8 as plan
from ..kernels.gemm_plan.gemm_mma import GemmConfig, shared_limit
from ..kernels.gemm_plan.gemm_mma_int8 import Int8GemmProblem
from ..target import Target
from .arith import declare
from .llvm_types import F32, I32, I64
from .mma_gemm import (GemmKernels, Index, MmaKind, _kernel_function, dynamic_shared, emit_gemm_body,
                       gpu_module, optimized_ptx)
from .nvptx_target import LaunchConfig

I8 = ir.IntType(8)
_STORED = {"int8": I8, "uint8": I8, "int32": I32}


def _load_int(b: ir.IRBuilder, base: ir.Value, index: ir.Value, dtype: str) -> ir.Value:
    """One element of an integer array as int32 (8-bit ones sign- or zero-extended)."""
    value = b.load(b.gep(base, [index], inbounds=True, source_etype=_STORED[dtype]), typ=_STORED[dtype])
    if dtype == "int32":
        return value
    return b.sext(value, I32) if dtype == "int8" else b.zext(value, I32)


def _requantized(b: ir.IRBuilder, problem: Int8GemmProblem, acc: ir.Value, multiplier: ir.Value) -> ir.Value:
    """float32(acc) * multiplier clamped to [lo - zp, hi - zp], rounded half to even, plus zp (int32)."""
    scaled = b.fmul(b.sitofp(acc, F32), multiplier)
    low, high = (ir.Constant(F32, float(bound - problem.zero_point)) for bound in (problem.lo, problem.hi))
    scaled = b.select(b.fcmp_ordered("<", scaled, low), low, scaled)
    scaled = b.select(b.fcmp_ordered(">", scaled, high), high, scaled)
    rounded = b.call(declare(b.module, "llvm.roundeven.f32", F32, [F32]), [scaled])
    return b.add(b.fptosi(rounded, I32), ir.Constant(I32, problem.zero_point))


def int8_kind(b: ir.IRBuilder, params: dict, problem: Int8GemmProblem) -> MmaKind:
    """m16n8k32 with int32 sums, and the store that applies the integer epilogue to two adjacent sums. A column's
    operands (correction, bias, multiplier) are loaded once per n tile, unguarded at a column clamped into C, and
    reused by its row tiles (loads in guarded blocks, one per sum, were not merged by LLVM: 384 a thread at 128x128)."""
    loaded: dict = {}

    def column_operands(col: Index, e: int) -> tuple[ir.Value, Optional[ir.Value], Optional[ir.Value]]:
        column = (col + e).minimum(problem.n - 1).wide()
        correction = _load_int(b, params["correction"], column, "int32")
        if problem.run_time_zero:
            correction = b.mul(correction, _load_int(b, params["zero"], ir.Constant(I64, 0), problem.a_dtype))
        bias = _load_int(b, params["bias"], column, "int32") if problem.bias else None
        multiplier = None
        if problem.multiplier:
            at = column if problem.multiplier == "column" else ir.Constant(I64, 0)
            multiplier = b.load(b.gep(params["multiplier"], [at], inbounds=True, source_etype=F32), typ=F32)
        return correction, bias, multiplier

    def store(row: Index, col: Index, pair: list[ir.Value], inside: ir.Value, tile_n: int) -> None:
        out = []
        for e, acc in enumerate(pair):
            if (tile_n, e) not in loaded:
                loaded[tile_n, e] = column_operands(col, e)
            correction, bias, multiplier = loaded[tile_n, e]
            value = b.add(acc, correction)
            if bias is not None:
                value = b.add(value, bias)
            if multiplier is not None:
                value = _requantized(b, problem, value, multiplier)
            out.append(value)
        elem = _STORED[problem.out_dtype]
        vec = ir.Constant(ir.VectorType(elem, 2), ir.Undefined)
        for e, v in enumerate(out):
            vec = b.insert_element(vec, v if elem == I32 else b.trunc(v, elem), ir.Constant(I32, e))
        index = (row * problem.n + col).wide()
        with b.if_then(inside):
            b.store(vec, b.gep(params["c"], [index], inbounds=True, source_etype=elem), align=2 * (elem.width // 8))

    return MmaKind(f"mma.sync.aligned.m16n8k32.row.col.s32{problem.mma_types}.s32", I32, store)


def emit_int8_gemm_body(b: ir.IRBuilder, params: dict, problem: Int8GemmProblem, cfg: GemmConfig, name: str) -> None:
    """The kernel's code at `b` (a kernel's entry, launched on the view's grid x cfg.threads); `params` the pointers
    by role. The A and B pointers are addressed in 16-bit units by the view's index functions."""
    error = plan.config_error(cfg, problem, 1 << 30)  # (shared memory is checked against the target by the caller)
    if error:
        raise ValueError(f"int8 GEMM {problem.m}x{problem.n}x{problem.k} with {cfg}: {error}")
    emit_gemm_body(b, params, plan.view(problem), cfg, name, int8_kind(b, params, problem))


@dataclass(frozen=True)
class Int8GemmKernels(GemmKernels):
    """The one kernel of an int8 GEMM (`problem` an Int8GemmProblem)."""

    def param_shapes(self) -> list[tuple[str, tuple[int, ...], str]]:
        p = self.problem
        shapes = {"a": ((p.m, p.k), p.a_dtype), "b": ((p.n, p.k), "int8"), "correction": ((p.n,), "int32"),
                  "zero": ((1,), p.a_dtype), "bias": ((p.n,), "int32"),
                  "multiplier": ((p.n,) if p.multiplier == "column" else (1,), "float32"),
                  "c": ((p.m, p.n), p.out_dtype)}
        return [(name, *shapes[name]) for name in self.params]


def build_int8_gemm(problem: Int8GemmProblem, cfg: GemmConfig, target: Target, name: str = "kiln_gemm_int8",
                    error: Optional[str] = None) -> Int8GemmKernels:
    """The PTX of `problem` tiled by `cfg` for `target` (O3)."""
    error = error or plan.config_error(cfg, problem, shared_limit(target.cpu))
    if error:
        raise ValueError(f"int8 GEMM {problem.m}x{problem.n}x{problem.k} with {cfg}: {error}")
    module = gpu_module(target)
    roles = plan.param_roles(problem)
    fn, params = _kernel_function(module, name, roles)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    emit_int8_gemm_body(b, params, problem, cfg, name)
    b.ret_void()
    launch = LaunchConfig(plan.grid(cfg, problem), (cfg.threads, 1, 1), cfg.shared_bytes, dynamic_shared(cfg))
    return Int8GemmKernels(problem, cfg, optimized_ptx(module, target), {name: launch}, tuple(roles))


__all__ = ["build_int8_gemm", "emit_int8_gemm_body", "int8_kind", "Int8GemmKernels"]
