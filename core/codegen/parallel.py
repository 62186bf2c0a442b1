"""PARALLEL loops through libgomp: the body is outlined and run by `GOMP_parallel` on a thread team."""
# The parent packs every free value (buffer pointers, enclosing loop and let variables, the extent)
# into a stack struct. A trampoline `void f(void*)` unpacks it, takes its static, contiguous,
# balanced share [tid*n/T, (tid+1)*n/T) of the iterations, and calls the worker, whose buffer
# parameters are `noalias` again so LLVM keeps optimizing the body as well as a kernel's own.
# A parallel loop nested in another parallel loop (or in a vector body) runs serially.
from __future__ import annotations

from llvmlite import ir

from ..tir.stmt import For
from .analysis import buffers_used, free_vars
from .arith import declare
from .codegen_llvm import FunctionEmitter
from .llvm_types import I32, I64, PTR, VOID, reg_type


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
    frame_t = ir.LiteralStructType([PTR] * len(bufs) + value_types + [I64])
    tramp = _emit_trampoline(fe, worker, frame_t, len(bufs) + len(values), base)

    extent = fe.emit_index(loop.extent)
    frame = fe.alloca(frame_t, base + ".frame", align=8)
    fields = [fe.bufs[x] for x in bufs] + [fe.vars[v] for v in values] + [extent]
    for i, value in enumerate(fields):
        b.store(value, b.gep(frame, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True, source_etype=frame_t))
    # Ask for no more threads than iterations (0 lets OpenMP pick its default team size).
    max_threads = b.sext(b.call(declare(ctx.module, "omp_get_max_threads", I32, []), []), I64)
    team = b.select(b.icmp_signed("<", extent, max_threads), b.trunc(extent, I32), ir.Constant(I32, 0))
    gomp = declare(ctx.module, "GOMP_parallel", VOID, [PTR, PTR, I32, I32])
    with b.if_then(b.icmp_signed(">", extent, ir.Constant(I64, 0))):
        b.call(gomp, [tramp, frame, team, ir.Constant(I32, 0)])


def _emit_worker(fe: FunctionEmitter, loop: For, bufs, values, value_types, name: str) -> ir.Function:
    """`void worker(ptr noalias bufs..., values..., i64 begin, i64 end)` running iterations [begin, end)."""
    fnty = ir.FunctionType(VOID, [PTR] * len(bufs) + value_types + [I64, I64])
    fn = ir.Function(fe.ctx.module, fnty, name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    inner = FunctionEmitter(fe.ctx, fn, fe.kernel_name, in_parallel=True)
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


def _emit_trampoline(fe: FunctionEmitter, worker: ir.Function, frame_t: ir.Type, n_fields: int, name: str):
    """`void tramp(void* frame)`, what each OpenMP thread runs: unpack, pick this thread's share, call."""
    module = fe.ctx.module
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR]), name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    frame = fn.args[0]

    def field(i: int) -> ir.Value:
        ptr = b.gep(frame, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True, source_etype=frame_t)
        return b.load(ptr, typ=frame_t.elements[i])

    args = [field(i) for i in range(n_fields)]
    extent = field(n_fields)
    tid = b.sext(b.call(declare(module, "omp_get_thread_num", I32, []), []), I64)
    team = b.sext(b.call(declare(module, "omp_get_num_threads", I32, []), []), I64)
    begin = b.sdiv(b.mul(tid, extent), team)
    end = b.sdiv(b.mul(b.add(tid, ir.Constant(I64, 1)), extent), team)
    with b.if_then(b.icmp_signed("<", begin, end)):
        b.call(worker, args + [begin, end])
    b.ret_void()
    return fn
