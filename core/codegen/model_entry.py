"""The ahead-of-time executor of a whole model: a ModelPlan compiled into `kiln_graph_run`."""
# `int32_t kiln_graph_run(void* arena, const void* weights, const void* const* inputs, void* const* outputs)`
# calls the kernels in order with pointers into the arena, the weights blob, or the caller's
# inputs/outputs; nothing is allocated per call. `kiln_graph_profile` does the same and also writes
# each call's wall time (ms), for the report's per-kernel breakdown. Data symbols:
# `kiln_arena_bytes`, `kiln_weights_bytes` (int64), `kiln_graph_num_inputs`, `kiln_graph_num_outputs`,
# `kiln_graph_num_calls` (int32) and `kiln_graph_call_names` (const char*[]). The C runtime wraps
# these in its public functions (`kiln_num_inputs()`, ...); a C symbol cannot be both a variable
# and a function, which is why the counts carry `graph_`.
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Mapping, Optional

from llvmlite import ir

from ..errors import CodegenError
from ..tir.index_guard import INDEX_FAULT, uses_index_fault
from ..tir.stmt import PrimFunc
from .control_flow import emit_control_call, emit_sub_runners, validate_control
from .llvm_types import F64, I8, I32, I64, PTR, itemsize

KINDS = ("input", "output", "weight", "arena")


@dataclass(frozen=True)
class BufferRef:
    kind: str  # "input" | "output" | "weight" | "arena"
    index: int = 0  # input/output position
    offset: int = 0  # byte offset into the weights blob or the arena


@dataclass(frozen=True)
class KernelCall:
    func: str  # the compiled function called (identical kernels share one)
    args: tuple[BufferRef, ...]
    label: str = ""  # the kernel's own name, for the profile's per-call names; `func` when empty
    checks: str = ""  # the nodes whose indices the call checks, for kiln_last_error() (core/tir/index_guard.py)


@dataclass(frozen=True)
class ModelPlan:
    calls: tuple[KernelCall, ...]
    num_inputs: int
    num_outputs: int
    arena_bytes: int
    weights_bytes: int
    # The artifact's name: the library exports the ABI as PREFIX_load, ... and nothing else (kernels
    # internal); None exports everything under the runtime's own kiln_ names (the compatible default).
    export_prefix: Optional[str] = None


def validate_plan(plan: ModelPlan, funcs: Mapping[str, PrimFunc]) -> None:
    """Reject a plan the generated code could not run safely; every message names the call and argument."""
    for n, what in ((plan.num_inputs, "num_inputs"), (plan.num_outputs, "num_outputs"),
                    (plan.arena_bytes, "arena_bytes"), (plan.weights_bytes, "weights_bytes")):
        if n < 0:
            raise CodegenError(f"model plan: {what} is negative ({n})")
    for pos, call in enumerate(plan.calls):
        if not isinstance(call, KernelCall):  # If / Loop: their branches' and body's plans
            validate_control(call, funcs, validate_plan)
            continue
        func = funcs.get(call.func)
        where = f"model plan call #{pos} ({call.func})"
        if func is None:
            raise CodegenError(f"{where}: no kernel of that name was given to the build")
        if len(call.args) != len(func.params):
            raise CodegenError(f"{where}: {len(call.args)} arguments for {len(func.params)} parameters")
        spans = []
        for i, (ref, buf) in enumerate(zip(call.args, func.params)):
            written = i >= func.num_inputs
            spans.append((_span(plan, ref, buf.nbytes, itemsize(buf.dtype), f"{where} argument {i} ({buf.name})",
                                written), written, buf.name))
        for a in range(len(spans)):
            for b in range(a + 1, len(spans)):
                (ka, lo_a, hi_a), wa, na = spans[a]
                (kb, lo_b, hi_b), wb, nb = spans[b]
                if ka == kb and lo_a < hi_b and lo_b < hi_a and (wa or wb):
                    raise CodegenError(f"{where}: arguments {na} and {nb} overlap and one is written "
                                       f"(kernel parameters are noalias)")


def _span(plan: ModelPlan, ref: BufferRef, nbytes: int, align: int, where: str, written: bool):
    """(space, first byte, end byte) that `ref` covers; inputs/outputs are spaces of their own."""
    if ref.kind not in KINDS:
        raise CodegenError(f"{where}: unknown buffer kind {ref.kind!r}; expected one of {', '.join(KINDS)}")
    if ref.kind in ("input", "output"):
        count = plan.num_inputs if ref.kind == "input" else plan.num_outputs
        if not 0 <= ref.index < count:
            raise CodegenError(f"{where}: {ref.kind} index {ref.index} out of range (the model has {count})")
        if ref.kind == "input" and written:
            raise CodegenError(f"{where}: a model input is passed where the kernel writes (inputs are read-only)")
        return (f"{ref.kind}{ref.index}", 0, nbytes)
    if ref.kind == "weight" and written:
        raise CodegenError(f"{where}: the weights are passed where the kernel writes (weights are read-only)")
    limit = plan.arena_bytes if ref.kind == "arena" else plan.weights_bytes
    if ref.offset < 0 or ref.offset + nbytes > limit:
        raise CodegenError(f"{where}: bytes [{ref.offset}, {ref.offset + nbytes}) fall outside the "
                           f"{ref.kind} of {limit} bytes")
    if ref.offset % align:
        raise CodegenError(f"{where}: {ref.kind} offset {ref.offset} is not a multiple of the element size {align}")
    return (ref.kind, ref.offset, ref.offset + nbytes)


def emit_model_entry(module: ir.Module, plan: ModelPlan, funcs: Mapping[str, PrimFunc],
                     kernels: Mapping[str, ir.Function]) -> None:
    validate_plan(plan, funcs)
    # Kernels stay out of line in the runners: inlined, small kernels (fully unrolled copies, parallel
    # launch wrappers) piled up twice (run and profile) in one huge basic block, whose instruction
    # selection is superlinear: distilbert's build spent 28 of 34 s emitting the two runners. A call
    # per kernel costs nothing next to the kernel, and the profile then times real kernel calls.
    for name in {call.func for call in plan.calls}:
        if name in kernels:
            kernels[name].attributes.add("noinline")
    emit_graph_globals(module, plan, plan.calls)
    emit_sub_runners(module, plan, lambda sub, name: _emit_runner(module, sub, kernels, funcs, False, name))
    _emit_runner(module, plan, kernels, funcs, profile=False)
    _emit_runner(module, plan, kernels, funcs, profile=True)


def emit_graph_globals(module: ir.Module, plan, calls) -> None:
    """The sizes and counts kiln_runtime.c reads (`plan`: a ModelPlan or BucketedPlan), and the names of `calls`
    (the kernel calls `kiln_profile` times)."""
    _global(module, "kiln_arena_bytes", ir.Constant(I64, plan.arena_bytes))
    _global(module, "kiln_weights_bytes", ir.Constant(I64, plan.weights_bytes))
    _global(module, "kiln_graph_num_inputs", ir.Constant(I32, plan.num_inputs))
    _global(module, "kiln_graph_num_outputs", ir.Constant(I32, plan.num_outputs))
    _global(module, "kiln_graph_num_calls", ir.Constant(I32, len(calls)))
    names = [_cstring(module, f"kiln.call_name.{i}", c.label or c.func) for i, c in enumerate(calls)]
    _global(module, "kiln_graph_call_names", ir.Constant(ir.ArrayType(PTR, len(names)), names))


def _emit_runner(module: ir.Module, plan: ModelPlan, kernels: Mapping[str, ir.Function],
                 funcs: Mapping[str, PrimFunc], profile: bool, name: str = "") -> ir.Function:
    params = [PTR, PTR, PTR, PTR] + ([PTR] if profile else [])
    fn = ir.Function(module, ir.FunctionType(I32, params), name or ("kiln_graph_profile" if profile else "kiln_graph_run"))
    fn.attributes.add("nounwind")
    arena, weights, inputs, outputs = fn.args[:4]
    for arg, name in zip(fn.args, ("arena", "weights", "inputs", "outputs", "call_ms")):
        arg.name = name
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    now = (module.globals.get("kiln_runtime_now_ms") or
           ir.Function(module, ir.FunctionType(F64, []), "kiln_runtime_now_ms")) if profile else None

    def pointer(ref: BufferRef) -> ir.Value:
        if ref.kind in ("input", "output"):
            table = inputs if ref.kind == "input" else outputs
            return b.load(b.gep(table, [ir.Constant(I64, ref.index)], inbounds=True, source_etype=PTR), typ=PTR)
        base = arena if ref.kind == "arena" else weights
        return b.gep(base, [ir.Constant(I64, ref.offset)], inbounds=True, source_etype=I8)

    for pos, call in enumerate(plan.calls):
        if not isinstance(call, KernelCall):  # If / Loop (core/codegen/control_flow.py), timed whole
            start = b.call(now, []) if profile else None
            emit_control_call(module, b, call, weights, pointer)
            if profile:
                slot = b.gep(fn.args[4], [ir.Constant(I64, pos)], inbounds=True, source_etype=F64)
                b.store(b.fsub(b.call(now, []), start), slot)
            continue
        args = [pointer(r) for r in call.args]
        func = funcs.get(call.func)
        record = args[func.params.index(INDEX_FAULT)] if func is not None and uses_index_fault(func) else None
        if record is not None:
            b.store(ir.Constant(I64, 0), record, align=8)  # its arena slot may hold another value's bytes
        start = b.call(now, []) if profile else None
        b.call(kernels[call.func], args)
        if profile:
            slot = b.gep(fn.args[4], [ir.Constant(I64, pos)], inbounds=True, source_etype=F64)
            b.store(b.fsub(b.call(now, []), start), slot)
        if record is not None:
            _fail_on_index_fault(module, b, record, call)
    b.ret(ir.Constant(I32, 0))
    return fn


def _fail_on_index_fault(module: ir.Module, b: ir.IRBuilder, record: ir.Value, call: KernelCall) -> None:
    """After a call that checks indices: when it recorded a bad one, the runner stops and returns the runtime's
    code, kiln_last_error() naming the nodes (the arena and outputs are then undefined)."""
    report = module.globals.get("kiln_runtime_index_error") or ir.Function(
        module, ir.FunctionType(I32, [PTR, PTR]), "kiln_runtime_index_error")
    flag = b.load(record, typ=I64, align=8)
    with b.if_then(b.icmp_unsigned("!=", flag, ir.Constant(I64, 0)), likely=False):
        text = call.checks or f"kernel {call.label or call.func}"
        name = f"kiln.index_check.{hashlib.sha1(text.encode()).hexdigest()[:16]}"
        where = module.globals.get(name) or _cstring(module, name, text)
        b.ret(b.call(report, [where, record]))


def _global(module: ir.Module, name: str, value: ir.Constant) -> None:
    g = ir.GlobalVariable(module, value.type, name)
    g.initializer = value
    g.global_constant = True


def _cstring(module: ir.Module, name: str, text: str) -> ir.GlobalVariable:
    data = bytearray(text.encode()) + b"\0"
    g = ir.GlobalVariable(module, ir.ArrayType(I8, len(data)), name)
    g.initializer = ir.Constant(g.value_type, data)
    g.global_constant = True
    g.linkage = "private"
    return g
