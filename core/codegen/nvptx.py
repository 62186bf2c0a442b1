"""GPU kernels -> PTX through LLVM's NVPTX backend (no CUDA toolkit needed): thread-bound loops
become the launch grid's special registers, shared buffers `addrspace(3)` globals, Barrier `bar.sync`.

`verify_gpu_kernel` rejects what would not run correctly on a GPU (unbound stores, oversized blocks
or shared memory, a barrier some threads of a block skip) with one message naming the kernel.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Iterator, Optional, Sequence

import llvmlite.binding as llvm
from llvmlite import ir

from ..errors import CodegenError, ScheduleError
from ..process.fork_map import forked_map
from ..target import Target
from ..te.intrinsics import get_intrinsic
from ..tir.expr import Var
from ..tir.functor import walk_expr, walk_stmt
from ..tir.stmt import (Allocate, Barrier, For, ForKind, IfThenElse, IntrinsicCall, LetStmt, PrimFunc, Seq, Stmt,
                        Store)
from .analysis import const_int
from .codegen_llvm import FunctionEmitter, ModuleContext, declare_kernel
from .kernel_objects import build_jobs
from .llvm_env import LLVM_LOCK, print_ir
from .llvm_types import I32, I64, PTR, itemsize, mem_type
from .nvptx_target import SHARED, LaunchConfig, target_machine
from .ptx_join import join_ptx

GRID_LIMITS = {"blockIdx.x": 2**31 - 1, "blockIdx.y": 65535, "blockIdx.z": 65535}
BLOCK_LIMITS = {"threadIdx.x": 1024, "threadIdx.y": 1024, "threadIdx.z": 64}
_SREG = {"threadIdx": "tid", "blockIdx": "ctaid"}


class GPUScheduleError(ScheduleError):
    """A kernel scheduled for a GPU that cannot run there as written."""

    code = "invalid_gpu_schedule"


def _bound_loops(stmt: Stmt) -> Iterator[For]:
    for s in walk_stmt(stmt):
        if isinstance(s, For) and s.kind is ForKind.THREAD_BINDING:
            yield s


def launch_config(func: PrimFunc) -> LaunchConfig:
    """Each launch axis spans the largest extent bound to it (smaller loops are guarded)."""
    dims: dict[str, int] = {}
    for loop in _bound_loops(func.body):
        extent = const_int(loop.extent)
        if extent is None:
            raise GPUScheduleError(f"kernel {func.name}: loop {loop.var.name} bound to {loop.thread_tag} has a "
                                   f"non-constant extent")
        dims[loop.thread_tag] = max(dims.get(loop.thread_tag, 1), extent)
    shared = sum(s.buffer.numel * itemsize(s.buffer.dtype) for s in _allocations(func.body) if s.buffer.scope == "shared")
    axis = lambda kind: tuple(dims.get(f"{kind}.{a}", 1) for a in "xyz")  # noqa: E731
    return LaunchConfig(axis("blockIdx"), axis("threadIdx"), shared)


def _allocations(stmt: Stmt) -> Iterator[Allocate]:
    return (s for s in walk_stmt(stmt) if isinstance(s, Allocate))


def verify_gpu_kernel(func: PrimFunc, target: Target) -> LaunchConfig:
    """The kernel's launch configuration, after checking that it can run on `target` as written."""
    launch = launch_config(func)
    where = f"kernel {func.name}"
    if launch.threads > target.max_threads_per_block:
        raise GPUScheduleError(f"{where}: a block of {launch.block} = {launch.threads} threads exceeds the "
                               f"{target.max_threads_per_block} of {target.cpu}")
    for tag, limit in {**GRID_LIMITS, **BLOCK_LIMITS}.items():
        kind, a = tag.split(".")
        size = (launch.grid if kind == "blockIdx" else launch.block)["xyz".index(a)]
        if size > limit:
            raise GPUScheduleError(f"{where}: {tag} spans {size}, more than the GPU's {limit}")
    if launch.shared_bytes > target.max_shared_bytes:
        raise GPUScheduleError(f"{where}: {launch.shared_bytes} bytes of shared memory exceed the "
                               f"{target.max_shared_bytes} a block may have")
    _check_stmt(func.body, where, launch, bound=False, divergent=False, thread_vars=frozenset())
    return launch


def _check_stmt(s: Stmt, where: str, launch: LaunchConfig, bound: bool, divergent: bool,
                thread_vars: frozenset) -> None:
    """`bound`: inside a thread-bound loop; `divergent`: some threads of a block may not get here."""
    rec = lambda x, **kw: _check_stmt(x, where, launch, **{"bound": bound, "divergent": divergent,  # noqa: E731
                                                             "thread_vars": thread_vars, **kw})
    if isinstance(s, (Store, IntrinsicCall)):  # a tensor intrinsic writes its first operand's region
        if not bound:
            written = s.buffer if isinstance(s, Store) else s.operands[0].buffer
            raise GPUScheduleError(f"{where}: {written.name} is written outside every loop bound to blockIdx/"
                                   f"threadIdx (every thread would write it); bind the stage's loops")
        if isinstance(s, IntrinsicCall) and divergent and get_intrinsic(s.name).warp_collective:
            raise GPUScheduleError(f"{where}: {s.name} is executed by a whole warp together, but sits where only "
                                   f"some threads arrive (a guard, or a thread loop shorter than the block)")
    elif isinstance(s, Barrier):
        if divergent:
            raise GPUScheduleError(f"{where}: a barrier sits where only some threads of a block arrive (under a "
                                   f"thread-dependent condition or a thread loop shorter than the block); it "
                                   f"would hang the block")
    elif isinstance(s, For):
        if s.kind is ForKind.PARALLEL:
            raise GPUScheduleError(f"{where}: loop {s.var.name} is parallel (a CPU thread-pool loop); on a GPU "
                                   f"bind it to blockIdx/threadIdx instead")
        if s.kind is ForKind.THREAD_BINDING:
            kind, a = s.thread_tag.split(".")
            span = (launch.grid if kind == "blockIdx" else launch.block)["xyz".index(a)]
            guarded = const_int(s.extent) < span
            tvars = thread_vars | {s.var} if kind == "threadIdx" else thread_vars
            rec(s.body, bound=True, divergent=divergent or guarded, thread_vars=tvars)
        else:
            rec(s.body)
    elif isinstance(s, IfThenElse):
        depends = any(isinstance(e, Var) and e in thread_vars for e in walk_expr(s.cond))
        rec(s.then_case, divergent=divergent or depends)
        if s.else_case is not None:
            rec(s.else_case, divergent=divergent or depends)
    elif isinstance(s, LetStmt):
        depends = any(isinstance(e, Var) and e in thread_vars for e in walk_expr(s.value))
        rec(s.body, thread_vars=thread_vars | {s.var} if depends else thread_vars)
    elif isinstance(s, Seq):
        for x in s.stmts:
            rec(x)
    elif isinstance(s, Allocate):
        rec(s.body)


class NVPTXEmitter(FunctionEmitter):
    """FunctionEmitter for a GPU kernel: each thread runs the body once for its own grid position."""

    def __init__(self, ctx: ModuleContext, fn: ir.Function, kernel_name: str, launch: LaunchConfig):
        super().__init__(ctx, fn, kernel_name)
        self.launch = launch

    def _for(self, s: For) -> None:
        if s.kind is ForKind.THREAD_BINDING:
            self._bound_for(s)
        elif s.kind is ForKind.VECTORIZED:  # a thread has no SIMD lanes: the loop unrolls instead
            self._unrolled(s)
        else:
            super()._for(s)

    def _bound_for(self, s: For) -> None:
        kind, a = s.thread_tag.split(".")
        name = f"llvm.nvvm.read.ptx.sreg.{_SREG[kind]}.{a}"
        sreg = self.ctx.module.globals.get(name) or ir.Function(self.ctx.module, ir.FunctionType(I32, []), name)
        index = self.b.zext(self.b.call(sreg, []), I64)
        span = (self.launch.grid if kind == "blockIdx" else self.launch.block)["xyz".index(a)]
        extent = const_int(s.extent)
        value = self.iv_value(s.var, index)
        if extent < span:
            with self.b.if_then(self.b.icmp_unsigned("<", index, ir.Constant(I64, extent))):
                self.bound(s.var, value, lambda: self.emit_stmt(s.body))
        else:
            self.bound(s.var, value, lambda: self.emit_stmt(s.body))

    def _allocate(self, s: Allocate) -> None:
        if s.buffer.scope != "shared":
            return super()._allocate(s)
        buf = s.buffer
        array = ir.ArrayType(mem_type(buf.dtype), buf.numel)
        g = ir.GlobalVariable(self.ctx.module, array, self.ctx.fresh(f"{self.kernel_name}.{buf.name}"),
                              addrspace=SHARED)
        g.linkage = "internal"
        g.initializer = ir.Constant(array, ir.Undefined)
        g.align = 16
        with self.b.goto_block(self.entry):
            self.bufs[buf] = self.b.addrspacecast(g, PTR)  # NVPTX's InferAddressSpaces restores ld.shared
        try:
            self.emit_stmt(s.body)
        finally:
            del self.bufs[buf]

    def _barrier(self) -> None:
        name = "llvm.nvvm.barrier0"
        fn = self.ctx.module.globals.get(name) or ir.Function(self.ctx.module, ir.FunctionType(ir.VoidType(), []), name)
        fn.attributes.add("convergent")
        self.b.call(fn, [])


def lower_gpu_module(funcs: Sequence[PrimFunc], target: Target) -> tuple[ir.Module, dict[str, LaunchConfig]]:
    """The unoptimized NVPTX module of `funcs` (each a `ptx_kernel`) and each kernel's launch."""
    from ..kernels.gemm_plan.gemm_mma_int8 import int8_gemm_of
    from ..kernels.gemm_plan.kernel_attr import gemm_of
    from ..kernels.gemm_plan.gemm_wgmma import WgmmaConfig
    from .mma_gemm import dynamic_shared, emit_gemm_body, emit_split_reduce_body
    from .mma_gemm_int8 import emit_int8_gemm_body
    from .wgmma_gemm import emit_wgmma_body

    if not target.triple.startswith("nvptx"):
        raise CodegenError(f"target {target.name} is not a GPU target")
    module = ir.Module(name="kiln_gpu")
    module.triple = target.triple
    module.data_layout = str(target_machine(target).target_data)
    ctx = ModuleContext(module, target)
    launches: dict[str, LaunchConfig] = {}
    for func in funcs:
        launches[func.name] = launch = verify_gpu_kernel(func, target)
        fn = declare_kernel(module, func)
        fn.calling_convention = "ptx_kernel"
        gemm = gemm_of(func)
        if gemm is not None:  # a whole group as the tensor-core GEMM: its loops only bind the launch
            problem, cfg, where = gemm
            emit = emit_wgmma_body if isinstance(cfg, WgmmaConfig) else emit_gemm_body
            b = ir.IRBuilder(fn.append_basic_block("entry"))
            emit(b, {role: fn.args[index] for role, index in where.items()}, problem, cfg, func.name)
            b.ret_void()
            launches[func.name] = LaunchConfig(launch.grid, launch.block, cfg.shared_bytes, dynamic_shared(cfg))
            if cfg.split_k > 1:  # its parts summed (and the epilogue) by a second kernel on the same arguments
                reduce_fn = declare_kernel(module, replace(func, name=split_reduce_name(func.name)))
                reduce_fn.calling_convention = "ptx_kernel"
                b = ir.IRBuilder(reduce_fn.append_basic_block("entry"))
                launches[reduce_fn.name] = emit_split_reduce_body(
                    b, {role: reduce_fn.args[index] for role, index in where.items()}, problem, cfg)
                b.ret_void()
            continue
        int8 = int8_gemm_of(func)
        if int8 is not None:  # the int8 tensor-core GEMM (its loops, too, only bind the launch)
            problem, cfg, where = int8
            b = ir.IRBuilder(fn.append_basic_block("entry"))
            emit_int8_gemm_body(b, {role: fn.args[index] for role, index in where.items()}, problem, cfg, func.name)
            b.ret_void()
            launches[func.name] = LaunchConfig(launch.grid, launch.block, cfg.shared_bytes, dynamic_shared(cfg))
            continue
        fe = NVPTXEmitter(ctx, fn, func.name, launch)
        for arg, buf in zip(fn.args, func.params):
            fe.bufs[buf] = arg
        fe.emit_stmt(func.body)
        fe.finish()
    return module, launches


def split_reduce_name(kernel: str) -> str:
    """The name of the kernel that sums a split-K tensor-core GEMM's parts (launched right after it)."""
    return f"{kernel}_reduce"


def emit_ptx(funcs: Sequence[PrimFunc], target: Target,
             jobs: Optional[int] = None) -> tuple[str, dict[str, LaunchConfig]]:
    """PTX assembly of `funcs` (optimized at O3) and each kernel's launch configuration. Each kernel (with its split-K
    companion) is a module of its own, generated on up to `jobs` forked workers (default `build_jobs()`: LLVM's
    codegen is single-threaded: a float16 resnet50's PTX took 85-95 s on one core) and joined in `funcs`' order, so the
    text is the same whatever the number of workers. DEBUG=3 prints the optimized LLVM IR to stderr."""
    funcs = list(funcs)
    if not funcs:
        return _module_ptx(funcs, target)
    jobs = build_jobs() if jobs is None else jobs
    parts = dict(forked_map(lambda k: _module_ptx(funcs[k:k + 1], target), range(len(funcs)), jobs))
    launches: dict[str, LaunchConfig] = {}
    for k in range(len(funcs)):
        launches.update(parts[k][1])
    return join_ptx([parts[k][0] for k in range(len(funcs))]), launches


def _module_ptx(funcs: Sequence[PrimFunc], target: Target) -> tuple[str, dict[str, LaunchConfig]]:
    """The PTX of one LLVM module of `funcs` and their launches."""
    module, launches = lower_gpu_module(funcs, target)
    with LLVM_LOCK:
        tm = target_machine(target)
        try:
            mod = llvm.parse_assembly(str(module))
            mod.verify()
        except RuntimeError as e:
            raise CodegenError(f"generated NVPTX IR is invalid (a codegen bug): {e}") from None
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
        print_ir(mod, optimized=True)
        return tm.emit_assembly(mod), launches


__all__ = ["emit_ptx", "split_reduce_name", "lower_gpu_module", "launch_config", "verify_gpu_kernel", "LaunchConfig",
           "GPUScheduleError"]
