"""Build API: kernels (and an optional model plan) -> an O3 object per kernel and an entry object -> shared library.
DEBUG=3 prints the optimized LLVM IR to stderr, DEBUG=4 the unoptimized IR too."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Optional, Sequence

import llvmlite.binding as llvm
from llvmlite import ir

from ..errors import BuildError, CodegenError
from ..files.atomic import atomic_path
from ..target import Target, host_target
from ..tir.stmt import PrimFunc
from . import vecmath
from .codegen_llvm import ModuleContext, declare_kernel, emit_kernel
from .isa_dispatch import declared_symbol, kernel_dispatchers
from .kernel_objects import KernelObject, kernel_objects, new_module, optimize_module
from .kernel_objects import target_machine as cached_target_machine
from .llvm_env import LLVM_LOCK
from .llvm_types import I8
from .bucket_entry import BucketedPlan, emit_bucketed_entry
from .model_entry import ModelPlan, emit_model_entry
from .runtime_objects import prefixed_exports, runtime_objects
from .toolchain import CPU_ARCHES, find_compiler, link_shared


def target_machine(target: Target) -> llvm.TargetMachine:
    if target.arch not in CPU_ARCHES:
        raise CodegenError(f"target {target.name}: only CPU targets have an LLVM code generator here")
    return cached_target_machine(target)


def lower_module(funcs: Sequence[PrimFunc], target: Target, plan: ModelPlan | None = None) -> ir.Module:
    """Every kernel (exported under its own name), the model entry when `plan` is given, and a JSON
    description of the kernels' parameters that `load_kernels` uses to check calls."""
    names = [f.name for f in funcs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise CodegenError(f"two kernels share the name(s) {', '.join(dupes)}")
    target_machine(target)
    module = new_module(target)
    ctx = ModuleContext(module, target)
    kernels = {f.name: emit_kernel(ctx, f) for f in funcs}
    _embed_string(module, "kiln_kernels_json", json.dumps(kernel_signatures(funcs)))
    if plan is not None:
        emit = emit_bucketed_entry if isinstance(plan, BucketedPlan) else emit_model_entry
        emit(module, plan, {f.name: f for f in funcs}, kernels)
    return module


def kernel_signatures(funcs: Sequence[PrimFunc]) -> list[dict]:
    return [{"name": f.name, "params": [{"name": p.name, "shape": list(p.shape), "dtype": p.dtype} for p in f.params],
             "num_inputs": f.num_inputs, "num_outputs": f.num_outputs} for f in funcs]


def _embed_string(module: ir.Module, name: str, text: str) -> None:
    data = bytearray(text.encode()) + b"\0"
    g = ir.GlobalVariable(module, ir.ArrayType(I8, len(data)), name)
    g.initializer = ir.Constant(ir.ArrayType(I8, len(data)), data)
    g.global_constant = True


def lower_to_llvm_ir(funcs: Sequence[PrimFunc], target: Optional[Target] = None, plan: ModelPlan | None = None) -> str:
    """The unoptimized LLVM IR text of `funcs` (and the model entry), for `target` (default: this machine)."""
    return str(lower_module(funcs, target or host_target(), plan))


def _optimize(funcs, target: Target, plan) -> tuple[llvm.ModuleRef, llvm.TargetMachine]:
    """The whole module (every kernel and the entry) optimized, and its target machine: for inspecting IR."""
    return optimize_module(lower_module(funcs, target, plan), target)


def optimized_llvm_ir(funcs: Sequence[PrimFunc], target: Optional[Target] = None, plan: ModelPlan | None = None) -> str:
    """The LLVM IR after the O3 pipeline (what becomes machine code), for `target` (default: this machine)."""
    mod, _ = _optimize(funcs, target or host_target(), plan)
    return str(mod)


def assembly(funcs: Sequence[PrimFunc], target: Optional[Target] = None) -> str:
    """The target assembly, for inspecting the generated instructions (default target: this machine)."""
    mod, tm = _optimize(funcs, target or host_target(), None)
    with LLVM_LOCK:
        return tm.emit_assembly(mod)


def build_cpu_library(funcs: Sequence[PrimFunc], target: Target, out_path: "str | Path",
                      plan: ModelPlan | None = None) -> Path:
    """Compile `funcs` and Kiln's thread pool (plus the model entry and C runtime when `plan` is given) into a shared library
    at `out_path`, written atomically. Each distinct kernel is one object file, from the kernel cache or compiled
    (core/codegen/kernel_objects.py); an entry module exports the kernels under their names and holds the model
    entry. Raises CodegenError for bad input, BuildError for toolchain failures."""
    cc = find_compiler(target)  # before the expensive part: a missing cross compiler fails fast
    target_machine(target)  # a target without an LLVM backend fails before any kernel is compiled
    # One object per distinct kernel and ISA variant (a multi-ISA target: each kernel for every variant's features)
    variants = [kernel_objects(funcs, variant) for variant in target.compiled_for()]
    entry, entry_libs = _entry_object(funcs, variants, target, plan)
    distinct = list({obj.key: obj for objects in variants for obj in objects.values()}.values())  # reproducible order
    libs = sorted(set(entry_libs).union(*(obj.compiled.libs for obj in distinct)))
    with tempfile.TemporaryDirectory(prefix="kiln-build-") as tmp:
        objects = [Path(tmp) / "entry.o"]
        objects[0].write_bytes(entry)
        for obj in distinct:
            path = Path(tmp) / f"{obj.symbol}.o"
            path.write_bytes(obj.compiled.data)
            objects.append(path)
        # The thread pool goes into every library (its PARALLEL loops call it); the model runtime with a plan.
        shaped = isinstance(plan, BucketedPlan)  # input-shape ranges: kiln_run_shaped and its queries too
        objects += runtime_objects(cc, Path(tmp), with_model=plan is not None, with_shapes=shaped,
                                   with_isa=len(variants) > 1)
        shim, script = prefixed_exports(cc, Path(tmp), plan.export_prefix if plan is not None else None, shaped,
                                        isa=len(variants) > 1)
        objects += shim
        with atomic_path(out_path) as partial:
            link_shared(cc, objects, partial, libs, script)
    return out_path


def _entry_object(funcs: Sequence[PrimFunc], variants: Sequence[dict[str, KernelObject]], target: Target,
                  plan: ModelPlan | None) -> tuple[bytes, list[str]]:
    """The library's entry module compiled: each kernel exported under its own name (a jump to its canonical
    symbol, or with several ISA variants to its dispatcher), the kernels' parameter list (`kiln_kernels_json`)
    and the model entry when `plan` is given."""
    names = [f.name for f in funcs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise CodegenError(f"two kernels share the name(s) {', '.join(dupes)}")
    module = new_module(target)
    if len(variants) > 1:
        callees = kernel_dispatchers(module, variants)
    else:
        callees = {name: declared_symbol(module, obj) for name, obj in variants[0].items()}
    for func in funcs:
        callee = callees[func.name]
        fn = declare_kernel(module, func)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        b.call(callee, list(fn.args), tail=True)
        b.ret_void()
    _embed_string(module, "kiln_kernels_json", json.dumps(kernel_signatures(funcs)))
    if plan is not None:
        emit = emit_bucketed_entry if isinstance(plan, BucketedPlan) else emit_model_entry
        emit(module, plan, {f.name: f for f in funcs}, {f.name: callees[f.name] for f in funcs})
    libs = ["-lmvec"] if vecmath.uses_libmvec(module) else []
    mod, tm = optimize_module(module, target)
    with LLVM_LOCK:
        return tm.emit_object(mod), libs


__all__ = ["build_cpu_library", "lower_to_llvm_ir", "optimized_llvm_ir", "assembly", "lower_module", "BuildError"]
