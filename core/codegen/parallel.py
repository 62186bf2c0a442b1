"""PARALLEL loops on Kiln's thread pool: the body is outlined and run by `kiln_parallel_for`."""
# The parent packs every free value (buffer pointers, enclosing loop and let variables) into a stack
# struct and calls `kiln_parallel_for(tramp, frame, extent)` (core/runtime/kiln_threadpool.c), which
# splits [0, extent) into static chunks. The trampoline `void tramp(void*, i64 begin, i64 end)`
# unpacks the struct and calls the worker, whose buffer parameters are `noalias` again so LLVM keeps
# optimizing the body as well as a kernel's own. A parallel loop nested in another parallel loop (or
# in a vector body) runs serially; so does a region the pool is asked for from inside a region.
from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from ..tir.stmt import For
from .analysis import buffers_used, free_vars
from .arith import declare
from .llvm_types import I32, I64, PTR, VOID, reg_type

if TYPE_CHECKING:  # the emitter calls this module for its parallel loops
    from .codegen_llvm import FunctionEmitter

# core/runtime/kiln_threadpool.h: void kiln_parallel_for(void (*)(void*, int64_t, int64_t), void*, int64_t)
POOL_LAUNCH = "kiln_parallel_for"


def emit_parallel(fe: FunctionEmitter, loop: For) -> None:
    ctx, b = fe.ctx, fe.b
    bufs = buffers_used(loop.body)
    for buf in bufs:
        fe.buffer_ptr(buf)  # fail early and clearly on an unknown buffer
    values = [v for v in free_vars(loop.body) if v != loop.var]
    for v in values:
        if v not in fe.vars:
            fe.emit_expr(v)  # raises the "used outside its scope" error
    value_types = [reg_type(v.dtype) for v in values]

    base = ctx.fresh(f"{fe.kernel_name}.parallel")
    worker = _emit_worker(fe, loop, bufs, values, value_types, base + ".body")
    frame_t = ir.LiteralStructType([PTR] * len(bufs) + value_types)
    tramp = _emit_trampoline(fe, worker, frame_t, base)

    extent = fe.emit_index(loop.extent)
    frame = fe.alloca(frame_t, base + ".frame", align=8)
    fields = [fe.bufs[x] for x in bufs] + [fe.vars[v] for v in values]
    for i, value in enumerate(fields):
        b.store(value, b.gep(frame, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True, source_etype=frame_t))
    launch = declare(ctx.module, POOL_LAUNCH, VOID, [PTR, PTR, I64])
    with b.if_then(b.icmp_signed(">", extent, ir.Constant(I64, 0))):
        b.call(launch, [tramp, frame, extent])


def _emit_worker(fe: FunctionEmitter, loop: For, bufs, values, value_types, name: str) -> ir.Function:
    """`void worker(ptr noalias bufs..., values..., i64 begin, i64 end)` running iterations [begin, end)."""
    fnty = ir.FunctionType(VOID, [PTR] * len(bufs) + value_types + [I64, I64])
    fn = ir.Function(fe.ctx.module, fnty, name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    inner = fe.worker_emitter(fn)
    for arg, buf in zip(fn.args, bufs):
        arg.name = buf.name
        arg.add_attribute("noalias")
        arg.add_attribute("captures(none)")
        if buf.nbytes > 0:
            arg.attributes.dereferenceable = buf.nbytes
        inner.bufs[buf] = arg
    for arg, v in zip(fn.args[len(bufs):], values):
        arg.name = v.name
        inner.vars[v] = arg
    begin, end = fn.args[-2], fn.args[-1]
    inner.loop(begin, end, lambda iv: inner.bound(loop.var, inner.iv_value(loop.var, iv),
                                                  lambda: inner.emit_stmt(loop.body)), loop.var.name)
    inner.finish()
    return fn


def _emit_trampoline(fe: FunctionEmitter, worker: ir.Function, frame_t: ir.LiteralStructType, name: str):
    """`void tramp(void* frame, i64 begin, i64 end)`, what the pool runs per chunk: unpack, call the worker."""
    fn = ir.Function(fe.ctx.module, ir.FunctionType(VOID, [PTR, I64, I64]), name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    frame, begin, end = fn.args

    def field(i: int) -> ir.Value:
        ptr = b.gep(frame, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True, source_etype=frame_t)
        return b.load(ptr, typ=frame_t.elements[i])

    b.call(worker, [field(i) for i in range(len(frame_t.elements))] + [begin, end])
    b.ret_void()
    return fn
