"""If and Loop in the model entry: each branch or loop body is a runner of its own (`kiln_cf_*`, the same
signature as kiln_graph_run) over its own plan; the entry reads the condition or trip count and calls it.

A run-time failure (a taken branch that was refused for the compiled shapes, a loop running past the room its
scan outputs have) stops the run with KILN_CONTROL_ERROR and kiln_last_error() saying why."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping, Optional

from llvmlite import ir

from ..tir.stmt import PrimFunc
from .llvm_types import I1, I8, I32, I64, PTR

if TYPE_CHECKING:  # the plan's types; model_entry calls into this module
    from .model_entry import BufferRef, ModelPlan

CONTROL_ERROR = 4  # KILN_CONTROL_ERROR in kiln_graph.h


@dataclass(frozen=True)
class SubCall:
    """One compiled branch or loop body: `runner` runs `plan` over its own part of the arena and the weights."""
    runner: str
    plan: ModelPlan
    weights_offset: int  # where its weights start in the model's weights
    arena: BufferRef
    inputs: tuple[BufferRef, ...]  # If: one per input of the branch; Loop: the body's inputs past its carried values


@dataclass(frozen=True)
class IfCall:
    condition: BufferRef
    branches: tuple[Optional[SubCall], ...]  # then, else (None: refused for these shapes, `refusals` says why)
    refusals: tuple[str, ...]
    outputs: tuple[BufferRef, ...]
    # a shape output, per branch [rank, dims...] (None: that branch writes it, a nested If deciding the shape)
    shapes: tuple[tuple[BufferRef, tuple[Optional[tuple[int, ...]], ...]], ...]
    label: str
    func: str = ""
    checks: str = ""
    given_shapes: tuple[tuple[BufferRef, ...], ...] = ((), ())  # per branch: the shape outputs its runner writes


@dataclass(frozen=True)
class GrowingValue:
    """A loop-carried value that grows along `axis` (a sequence of tokens): its slots hold the largest size, the
    body takes its valid length as an input and gives the new one as an [axis, length] output."""
    axis: int
    initial: int  # its first length
    length: BufferRef  # int64 slot the body reads
    pair: BufferRef  # int64 [2] slot the body writes
    final: BufferRef  # the loop's [axis, length] output


@dataclass(frozen=True)
class LoopCall:
    trip_count: Optional[BufferRef]  # int64; None: no M
    condition: Optional[BufferRef]  # bool; None: true at first (the body's condition still ends the loop, as in ORT)
    body: SubCall
    initial: tuple[BufferRef, ...]  # the carried values' first values
    nbytes: tuple[int, ...]  # per carried value
    carry: tuple[BufferRef, ...]  # arena slots the body reads the carried values from
    next: tuple[BufferRef, ...]  # arena slots it writes them to
    iteration: BufferRef  # int64 slot
    flag: BufferRef  # bool slot the body reads
    flag_out: BufferRef  # bool slot it writes
    finals: tuple[BufferRef, ...]
    scans: tuple[tuple[BufferRef, int], ...]  # a scan output, the bytes one iteration adds
    count: BufferRef  # int64 [1]: iterations run
    trip_bound: int  # the iterations the scan outputs have room for
    label: str
    func: str = ""
    checks: str = ""
    initial_nbytes: tuple[int, ...] = ()  # the first values' bytes (less than the slot's for a growing value)
    growing: tuple[GrowingValue, ...] = ()


def sub_calls(call) -> list[SubCall]:
    if isinstance(call, IfCall):
        return [s for s in call.branches if s is not None]
    return [call.body] if isinstance(call, LoopCall) else []


def validate_control(call, funcs: Mapping[str, PrimFunc], validate_plan: Callable) -> None:
    for sub in sub_calls(call):
        validate_plan(sub.plan, funcs)


def emit_sub_runners(module: ir.Module, plan: ModelPlan, emit_runner: Callable) -> None:
    """Every runner the control calls of `plan` use (those of nested ones first)."""
    for call in plan.calls:
        for sub in sub_calls(call):
            if sub.runner not in module.globals:
                emit_sub_runners(module, sub.plan, emit_runner)
                emit_runner(sub.plan, sub.runner)


def _memcpy(module: ir.Module, b: ir.IRBuilder, dst, src, nbytes: int) -> None:
    if nbytes <= 0:
        return
    fn = module.globals.get("llvm.memcpy.p0.p0.i64") or ir.Function(
        module, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64, I1]), "llvm.memcpy.p0.p0.i64")
    b.call(fn, [dst, src, ir.Constant(I64, nbytes), ir.Constant(I1, 0)])


def _table(b: ir.IRBuilder, pointers: list) -> ir.Value:
    with b.goto_block(b.function.entry_basic_block):  # once per call, not per loop iteration (allocas pile up)
        table = b.alloca(PTR, size=max(len(pointers), 1))
    for i, p in enumerate(pointers):
        b.store(p, b.gep(table, [ir.Constant(I64, i)], inbounds=True, source_etype=PTR))
    return table


def _fail(module: ir.Module, b: ir.IRBuilder, message: str) -> None:
    setter = module.globals.get("kiln_runtime_set_error") or ir.Function(
        module, ir.FunctionType(ir.VoidType(), [PTR]), "kiln_runtime_set_error")
    name = f"kiln.control_error.{hashlib.sha1(message.encode()).hexdigest()[:16]}"
    text = module.globals.get(name)
    if text is None:
        data = bytearray(message.encode()) + b"\0"
        text = ir.GlobalVariable(module, ir.ArrayType(I8, len(data)), name)
        text.initializer = ir.Constant(text.value_type, data)
        text.global_constant, text.linkage = True, "private"
    b.call(setter, [text])
    b.ret(ir.Constant(I32, CONTROL_ERROR))


def _run_sub(module: ir.Module, b: ir.IRBuilder, sub: SubCall, weights, pointer, inputs: list, outputs: list) -> None:
    """Calls `sub`'s runner; a failure inside it returns its code from the caller too."""
    runner = module.globals[sub.runner]
    base = b.gep(weights, [ir.Constant(I64, sub.weights_offset)], inbounds=True, source_etype=I8)
    rc = b.call(runner, [pointer(sub.arena), base, _table(b, inputs), _table(b, outputs)])
    with b.if_then(b.icmp_signed("!=", rc, ir.Constant(I32, 0)), likely=False):
        b.ret(rc)


def emit_control_call(module: ir.Module, b: ir.IRBuilder, call, weights, pointer: Callable) -> None:
    if isinstance(call, IfCall):
        _emit_if(module, b, call, weights, pointer)
    else:
        _emit_loop(module, b, call, weights, pointer)


def _emit_if(module: ir.Module, b: ir.IRBuilder, call: IfCall, weights, pointer: Callable) -> None:
    flag = b.icmp_unsigned("!=", b.load(pointer(call.condition), typ=I8), ir.Constant(I8, 0))
    with b.if_else(flag) as (then, otherwise):
        for k, block in enumerate((then, otherwise)):
            with block:
                sub = call.branches[k]
                if sub is None:
                    _fail(module, b, call.refusals[k])  # returns: the block ends there
                    continue
                _run_sub(module, b, sub, weights, pointer, [pointer(r) for r in sub.inputs],
                         [pointer(r) for r in (*call.outputs, *call.given_shapes[k])])
                for ref, per_branch in call.shapes:
                    if per_branch[k] is None:
                        continue
                    base = pointer(ref)
                    for i, d in enumerate(per_branch[k]):
                        b.store(ir.Constant(I64, d), b.gep(base, [ir.Constant(I64, i)], inbounds=True,
                                                           source_etype=I64), align=8)


def _emit_loop(module: ir.Module, b: ir.IRBuilder, call: LoopCall, weights, pointer: Callable) -> None:
    fn = b.function
    for carry, initial, n in zip(call.carry, call.initial, call.initial_nbytes or call.nbytes):
        _memcpy(module, b, pointer(carry), pointer(initial), n)
    for value in call.growing:
        b.store(ir.Constant(I64, value.initial), pointer(value.length), align=8)
    limit = (b.load(pointer(call.trip_count), typ=I64, align=8) if call.trip_count is not None
             else ir.Constant(I64, (1 << 63) - 1))
    flag_slot = pointer(call.flag)
    b.store(b.load(pointer(call.condition), typ=I8) if call.condition is not None else ir.Constant(I8, 1), flag_slot)
    entry = b.block
    header, body, done = (fn.append_basic_block(f"{call.label}_{part}") for part in ("header", "body", "done"))
    b.branch(header)
    b.position_at_end(header)
    i = b.phi(I64, "iteration")
    i.add_incoming(ir.Constant(I64, 0), entry)
    more = b.and_(b.icmp_signed("<", i, limit), b.icmp_unsigned("!=", b.load(flag_slot, typ=I8), ir.Constant(I8, 0)))
    b.cbranch(more, body, done)
    b.position_at_end(body)
    if call.scans or call.growing:
        with b.if_then(b.icmp_signed(">=", i, ir.Constant(I64, call.trip_bound)), likely=False):
            _fail(module, b, f"{call.label}: the loop runs past {call.trip_bound} iterations, the most its scan "
                             f"outputs and growing values were compiled for (raise --max-trip-count)")
    b.store(i, pointer(call.iteration), align=8)
    outputs = [pointer(call.flag_out)] + [pointer(r) for r in call.next]
    for ref, step in call.scans:
        outputs.append(b.gep(pointer(ref), [b.mul(i, ir.Constant(I64, step))], inbounds=True, source_etype=I8))
    outputs += [pointer(value.pair) for value in call.growing]
    inputs = [pointer(call.iteration), flag_slot] + [pointer(r) for r in call.carry]
    inputs += [pointer(value.length) for value in call.growing]
    _run_sub(module, b, call.body, weights, pointer, inputs + [pointer(r) for r in call.body.inputs], outputs)
    for carry, nxt, n in zip(call.carry, call.next, call.nbytes):
        _memcpy(module, b, pointer(carry), pointer(nxt), n)
    b.store(b.load(pointer(call.flag_out), typ=I8), flag_slot)
    for value in call.growing:  # the body's new length: entry 1 of its [axis, length]
        grown = b.gep(pointer(value.pair), [ir.Constant(I64, 1)], inbounds=True, source_etype=I64)
        b.store(b.load(grown, typ=I64, align=8), pointer(value.length), align=8)
    after = b.add(i, ir.Constant(I64, 1))
    i.add_incoming(after, b.block)
    b.branch(header)
    b.position_at_end(done)
    for final, carry, n in zip(call.finals, call.carry, call.nbytes):
        _memcpy(module, b, pointer(final), pointer(carry), n)
    b.store(i, pointer(call.count), align=8)
    for value in call.growing:
        final = pointer(value.final)
        b.store(ir.Constant(I64, value.axis), final, align=8)
        b.store(b.load(pointer(value.length), typ=I64, align=8),
                b.gep(final, [ir.Constant(I64, 1)], inbounds=True, source_etype=I64), align=8)
