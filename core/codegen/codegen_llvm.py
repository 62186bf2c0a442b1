"""TIR -> LLVM IR for one kernel: scalar expressions, statements, loops, local buffers.
Vectorized and parallel loops are handed to vectorize.py and parallel.py; on a CPU, GPU-bound
loops run serially and barriers vanish (a block's threads one after another), nvptx.py does the GPU."""
from __future__ import annotations

import itertools
from typing import Callable

from llvmlite import ir

from ..errors import CodegenError
from ..target import Target
from ..tir.expr import BinOp, Buffer, Call, Cast, Expr, FloatImm, IntImm, Load, Not, Select, Var
from ..tir.functor import walk_expr, walk_stmt
from ..tir.index_guard import INDEX_GUARD
from ..tir.simplify import specialize
from ..tir.stmt import (Allocate, Barrier, For, ForKind, IfThenElse, IntrinsicCall, LetStmt, PrimFunc, Seq, Stmt,
                        Store)
from . import arith, index_guard, narrow, vecmath
from .analysis import check_store_dtype, const_int, may_trap
from .intrinsics import emit_intrinsic_call
from .llvm_types import I1, I64, PTR, VOID, const, is_bool, is_signed, itemsize, lanes_of, mem_type, reg_type
from .parallel import emit_parallel
from .vectorize import emit_vectorized

# Unrolling beyond this many copies would bloat code for nothing; longer loops get unroll metadata instead.
MAX_FULL_UNROLL = 256


class LoopID(ir.values.MDValue):
    """A self-referential `llvm.loop` metadata node (llvmlite's add_metadata cannot build those)."""

    def __init__(self, module: ir.Module, props: list[ir.values.MDValue]):
        super().__init__(module, [], name=str(len(module.metadata)))
        self.operands = (self, *props)

    def __eq__(self, other):
        return self is other

    def __hash__(self):
        return id(self)


class ModuleContext:
    """State shared by every function emitted into one LLVM module."""

    def __init__(self, module: ir.Module, target: Target):
        self.module = module
        self.target = target
        self._ids = itertools.count()
        vecmath.enable(module, target)

    def fresh(self, prefix: str) -> str:
        return f"{prefix}.{next(self._ids)}"

    def loop_md(self, *props: tuple[str, object]) -> LoopID:
        nodes = []
        for key, value in props:
            ops = [ir.MetaDataString(self.module, key)]
            if value is not None:
                ops.append(ir.Constant(I1, int(value)) if isinstance(value, bool) else ir.Constant(ir.IntType(32), value))
            nodes.append(self.module.add_metadata(ops))
        return LoopID(self.module, nodes)


class FunctionEmitter:
    """Emits TIR statements and scalar expressions into one LLVM function."""

    def __init__(self, ctx: ModuleContext, fn: ir.Function, kernel_name: str, in_parallel: bool = False):
        self.ctx = ctx
        self.fn = fn
        self.kernel_name = kernel_name
        self.in_parallel = in_parallel  # a parallel loop inside a parallel region runs serially
        self.entry = fn.append_basic_block("entry")
        self.b = ir.IRBuilder(fn.append_basic_block("body"))
        self.vars: dict[Var, ir.Value] = {}
        self.bufs: dict[Buffer, ir.Value] = {}

    def worker_emitter(self, fn: ir.Function) -> FunctionEmitter:
        """An emitter for `fn`, the outlined body of one of this kernel's parallel loops."""
        return FunctionEmitter(self.ctx, fn, self.kernel_name, in_parallel=True)

    def finish(self) -> None:
        """Close the function: the entry block (which holds every alloca) jumps to the body."""
        if not self.b.block.is_terminated:
            self.b.ret_void()
        ir.IRBuilder(self.entry).branch(self.fn.blocks[1])

    # ------------------------------------------------------------ memory

    def buffer_ptr(self, buf: Buffer) -> ir.Value:
        try:
            return self.bufs[buf]
        except KeyError:
            raise CodegenError(f"kernel {self.kernel_name}: buffer {buf.name!r} is neither a parameter "
                               f"nor allocated here") from None

    def index_i64(self, index: Expr, value: ir.Value) -> ir.Value:
        if is_bool(index.dtype) or index.dtype.startswith("float"):
            raise CodegenError(f"kernel {self.kernel_name}: buffer index {index} has dtype {index.dtype}")
        t = ir.VectorType(I64, lanes_of(value)) if lanes_of(value) > 1 else I64
        if value.type == t:
            return value
        return self.b.sext(value, t) if is_signed(index.dtype) else self.b.zext(value, t)

    def element_ptr(self, buf: Buffer, index: ir.Value) -> ir.Value:
        return self.b.gep(self.buffer_ptr(buf), [index], inbounds=True, source_etype=mem_type(buf.dtype))

    def load_elem(self, buf: Buffer, ptr: ir.Value, lanes: int = 1) -> ir.Value:
        """Load `lanes` consecutive elements at `ptr` and convert them to register form."""
        mt = mem_type(buf.dtype)
        raw = self.b.load(ptr, typ=ir.VectorType(mt, lanes) if lanes > 1 else mt, align=itemsize(buf.dtype))
        return self.from_mem(buf.dtype, raw)

    def store_elem(self, buf: Buffer, ptr: ir.Value, value: ir.Value) -> None:
        self.b.store(self.to_mem(buf.dtype, value), ptr, align=itemsize(buf.dtype))

    def from_mem(self, dtype: str, raw: ir.Value) -> ir.Value:
        if dtype == "bool":
            return self.b.icmp_unsigned("!=", raw, ir.Constant(raw.type, None))
        return narrow.from_mem(self.b, dtype, raw)  # bfloat16/float8/float4 bits, sub-byte ints

    def to_mem(self, dtype: str, value: ir.Value) -> ir.Value:
        if dtype == "bool":
            return self.b.zext(value, ir.VectorType(mem_type("bool"), lanes_of(value)) if lanes_of(value) > 1
                               else mem_type("bool"))
        return narrow.to_mem(self.b, dtype, value)

    def alloca(self, t: ir.Type, name: str, align: int = 64) -> ir.Value:
        """A stack slot in the entry block, so loops reuse it instead of growing the stack."""
        with self.b.goto_block(self.entry):
            slot = self.b.alloca(t, name=name)
        slot.align = align
        slot.type = PTR  # opaque, like every other pointer here (llvmlite types allocas as `T*`)
        return slot

    # ------------------------------------------------------------ loops

    def loop(self, start: ir.Value, end: ir.Value, body: Callable[[ir.Value], None], name: str = "i",
             md: LoopID | None = None) -> None:
        """for (i = start; i < end; ++i) body(i); `md` becomes the latch's llvm.loop metadata."""
        b = self.b
        pre = b.block
        head = self.fn.append_basic_block(f"{name}.head")
        loop_body = self.fn.append_basic_block(f"{name}.body")
        done = self.fn.append_basic_block(f"{name}.end")
        b.branch(head)
        b.position_at_end(head)
        iv = b.phi(I64, name=name)
        iv.add_incoming(start, pre)
        b.cbranch(b.icmp_signed("<", iv, end), loop_body, done)
        b.position_at_end(loop_body)
        body(iv)
        nxt = b.add(iv, ir.Constant(I64, 1), flags=["nsw"])
        latch = b.branch(head)
        if md is not None:
            latch.set_metadata("llvm.loop", md)
        iv.add_incoming(nxt, b.block)
        b.position_at_end(done)

    def bound(self, var: Var, value: ir.Value, body: Callable[[], None]) -> None:
        """Run `body` with `var` bound to `value`, restoring any outer binding of the same name after."""
        old = self.vars.get(var)
        self.vars[var] = value
        try:
            body()
        finally:
            if old is None:
                self.vars.pop(var, None)
            else:
                self.vars[var] = old

    def serial_for(self, s: For, md: LoopID | None = None) -> None:
        end = self.emit_index(s.extent)
        self.loop(ir.Constant(I64, 0), end,
                  lambda iv: self.bound(s.var, self.iv_value(s.var, iv), lambda: self.emit_stmt(s.body)),
                  s.var.name, md)

    def iv_value(self, var: Var, iv: ir.Value) -> ir.Value:
        """The i64 induction value as `var`'s own dtype (loop variables may be int32)."""
        t = reg_type(var.dtype)
        return iv if iv.type == t else self.b.trunc(iv, t)

    def emit_index(self, e: Expr) -> ir.Value:
        return self.index_i64(e, self.emit_expr(e))

    # ------------------------------------------------------------ statements

    def emit_stmt(self, s: Stmt) -> None:
        if isinstance(s, Store):
            self._store(s)
        elif isinstance(s, Seq):
            for x in s.stmts:
                self.emit_stmt(x)
        elif isinstance(s, For):
            self._for(s)
        elif isinstance(s, IfThenElse):
            self._if(s)
        elif isinstance(s, LetStmt):
            self.bound(s.var, self.emit_expr(s.value), lambda: self.emit_stmt(s.body))
        elif isinstance(s, Allocate):
            self._allocate(s)
        elif isinstance(s, Barrier):
            self._barrier()
        elif isinstance(s, IntrinsicCall):
            emit_intrinsic_call(self, s)
        else:
            raise CodegenError(f"kernel {self.kernel_name}: cannot generate code for {type(s).__name__}")

    def _barrier(self) -> None:
        """A block's threads run one after another here, so what one wrote every later one sees."""

    def _store(self, s: Store) -> None:
        check_store_dtype(self.kernel_name, s)
        ptr = self.element_ptr(s.buffer, self.emit_index(s.index))
        self.store_elem(s.buffer, ptr, self.emit_expr(s.value))

    def _for(self, s: For) -> None:
        if s.var.dtype not in ("int64", "int32"):
            raise CodegenError(f"kernel {self.kernel_name}: loop variable {s.var} must be an integer")
        if s.kind is ForKind.VECTORIZED:
            emit_vectorized(self, s)
        elif s.kind is ForKind.PARALLEL and not self.in_parallel:
            emit_parallel(self, s)
        elif s.kind is ForKind.UNROLLED:
            self._unrolled(s)
        else:
            self.serial_for(s, self.pragma_md(s))

    def pragma_md(self, s: For) -> LoopID | None:
        """llvm.loop metadata for a serial loop's pragmas: ("pragma_unroll", n) asks LLVM's unroller
        for n copies of the body (a partial unroll with a remainder loop, unlike ForKind.UNROLLED)."""
        props = []
        for key, value in s.annotations:
            if key == "pragma_unroll":
                props.append(("llvm.loop.unroll.count", int(value)))
            elif key == "thread_tag":
                continue  # a GPU launch axis, run as a serial loop here
            else:
                raise CodegenError(f"kernel {self.kernel_name}: unknown loop annotation {key!r} on {s.var.name}")
        return self.ctx.loop_md(*props) if props else None

    def _unrolled(self, s: For) -> None:
        n = const_int(s.extent)
        if n is None or n > MAX_FULL_UNROLL:
            self.serial_for(s, self.ctx.loop_md(("llvm.loop.unroll.enable", None)))
            return
        if _selects_on(s.body, s.var):
            # A select on the loop variable (a Winograd transform's table of arms) is decided in
            # each copy here, which then emits its own arm only: emitting every arm and leaving the
            # folding to LLVM made an F(4x4) Winograd kernel take 18-28 s to build instead of ~1.
            for i in range(n):
                self.emit_stmt(specialize(s.body, s.var, i))
            return
        for i in range(n):
            self.bound(s.var, ir.Constant(reg_type(s.var.dtype), i), lambda: self.emit_stmt(s.body))

    def _if(self, s: IfThenElse) -> None:
        cond = arith.to_bool(self.b, s.cond.dtype, self.emit_expr(s.cond))
        if s.else_case is None:
            with self.b.if_then(cond):
                self.emit_stmt(s.then_case)
            return
        with self.b.if_else(cond) as (then, otherwise):
            with then:
                self.emit_stmt(s.then_case)
            with otherwise:
                self.emit_stmt(s.else_case)

    def _allocate(self, s: Allocate) -> None:
        buf = s.buffer
        if buf.numel <= 0:
            raise CodegenError(f"kernel {self.kernel_name}: local buffer {buf.name} has no elements")
        self.bufs[buf] = self.alloca(ir.ArrayType(mem_type(buf.dtype), buf.numel), buf.name)
        try:
            self.emit_stmt(s.body)
        finally:
            del self.bufs[buf]

    # ------------------------------------------------------------ expressions

    def emit_expr(self, e: Expr) -> ir.Value:
        b = self.b
        if isinstance(e, (IntImm, FloatImm)):
            return const(e.dtype, e.value)
        if isinstance(e, Var):
            try:
                return self.vars[e]
            except KeyError:
                raise CodegenError(f"kernel {self.kernel_name}: variable {e.name} is used outside its scope") from None
        if isinstance(e, Load):
            return self.load_elem(e.buffer, self.element_ptr(e.buffer, self.emit_index(e.index)))
        if isinstance(e, BinOp):
            return self._binop(e)
        if isinstance(e, Not):
            return b.xor(arith.to_bool(b, e.a.dtype, self.emit_expr(e.a)), ir.Constant(I1, 1))
        if isinstance(e, Cast):
            return arith.cast(b, e.value.dtype, e.dtype, self.emit_expr(e.value))
        if isinstance(e, Select):
            cond = arith.to_bool(b, e.cond.dtype, self.emit_expr(e.cond))
            return self.choose(cond, e.true_value, e.false_value)
        if isinstance(e, Call):
            if e.name == "reinterpret":
                return arith.reinterpret(b, e.args[0].dtype, e.dtype, self.emit_expr(e.args[0]))
            if e.name == INDEX_GUARD:
                return index_guard.emit_scalar(self, e)
            return arith.intrinsic(b, e.name, e.args[0].dtype, [self.emit_expr(a) for a in e.args])
        raise CodegenError(f"kernel {self.kernel_name}: cannot generate code for expression {type(e).__name__}")

    def _binop(self, e: BinOp) -> ir.Value:
        b = self.b
        if e.op in ("and", "or"):
            lhs = arith.to_bool(b, e.a.dtype, self.emit_expr(e.a))
            if may_trap(e.b):  # short-circuit, as C does, when the right side could fault
                t, f = (e.b, False) if e.op == "and" else (True, e.b)
                return self.choose(lhs, t, f, bool_result=True)
            return arith.binop(b, e.op, "bool", lhs, arith.to_bool(b, e.b.dtype, self.emit_expr(e.b)))
        return arith.binop(b, e.op, e.a.dtype, self.emit_expr(e.a), self.emit_expr(e.b), const_int(e.b))

    def choose(self, cond: ir.Value, t, f, bool_result: bool = False) -> ir.Value:
        """select(cond, t, f) on TIR arms (or Python bools); arms that may fault are only evaluated when taken."""
        def value(x) -> ir.Value:
            if isinstance(x, bool):
                return ir.Constant(I1, int(x))
            v = self.emit_expr(x)
            return arith.to_bool(self.b, x.dtype, v) if bool_result else v

        if not any(isinstance(x, Expr) and may_trap(x) for x in (t, f)):
            return self.b.select(cond, value(t), value(f))
        return self.diamond(cond, lambda: value(t), lambda: value(f), ("sel.t", "sel.f", "sel.end"))

    def diamond(self, cond: ir.Value, then: Callable[[], ir.Value], otherwise: Callable[[], ir.Value],
                names: tuple[str, str, str]) -> ir.Value:
        """then() if i1 `cond` else otherwise(), each emitted in its own block (real control flow), joined by a phi."""
        b = self.b
        then_bb, else_bb, merge = (self.fn.append_basic_block(n) for n in names)
        b.cbranch(cond, then_bb, else_bb)
        b.position_at_end(then_bb)
        tv = then()
        t_end = b.block
        b.branch(merge)
        b.position_at_end(else_bb)
        fv = otherwise()
        f_end = b.block
        b.branch(merge)
        b.position_at_end(merge)
        phi = b.phi(tv.type)
        phi.add_incoming(tv, t_end)
        phi.add_incoming(fv, f_end)
        return phi


# Symbols the runtime and the model entry define; a kernel may not take one of these names.
RESERVED_NAMES = frozenset({"kiln_graph_run", "kiln_graph_profile", "kiln_arena_bytes", "kiln_weights_bytes",
                            "kiln_graph_num_inputs", "kiln_graph_num_outputs", "kiln_graph_num_calls",
                            "kiln_kernels_json", "kiln_load", "kiln_run", "kiln_free", "kiln_last_error",
                            "kiln_set_num_threads", "kiln_num_inputs", "kiln_num_outputs", "kiln_profile",
                            "kiln_num_kernel_calls", "kiln_kernel_call_name", "kiln_get_num_threads",
                            "kiln_load_from_memory", "kiln_arena_size", "kiln_weights_size",
                            "kiln_runtime_now_ms", "kiln_parallel_for", "kiln_pool_set_threads",
                            "kiln_pool_get_threads", "kiln_pool_enter", "kiln_pool_leave",
                            "kiln_pool_worker_chunks", "kiln_runtime_index_error"})


def declare_kernel(module: ir.Module, func: PrimFunc) -> ir.Function:
    """`void name(ptr noalias p0, ...)`; each pointer is dereferenceable for its buffer's bytes.

    Alignment: kernels assume only the element type's natural alignment, never 64, because model
    inputs and outputs are the caller's own pointers (see core/runtime/kiln_runtime.c)."""
    if not func.name.isidentifier() or not func.name.isascii() or func.name in RESERVED_NAMES:
        raise CodegenError(f"kernel name {func.name!r} is not a usable C symbol (or is reserved by the runtime)")
    names = [p.name for p in func.params]
    if len(set(func.params)) != len(func.params):
        raise CodegenError(f"kernel {func.name}: the same buffer is passed twice among its parameters {names}")
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR] * len(func.params)), func.name)
    fn.attributes.add("nounwind")
    for arg, buf in zip(fn.args, func.params):
        arg.name = buf.name
        arg.add_attribute("noalias")
        arg.add_attribute("captures(none)")
        if buf.nbytes > 0:
            arg.attributes.dereferenceable = buf.nbytes
    return fn


def emit_kernel(ctx: ModuleContext, func: PrimFunc) -> ir.Function:
    fn = declare_kernel(ctx.module, func)
    fe = FunctionEmitter(ctx, fn, func.name)
    for arg, buf in zip(fn.args, func.params):
        if buf.scope != "global":
            raise CodegenError(f"kernel {func.name}: parameter {buf.name} has scope {buf.scope!r}, expected 'global'")
        fe.bufs[buf] = arg
    fe.emit_stmt(func.body)
    fe.finish()
    return fn


def _selects_on(stmt: Stmt, var: Var) -> bool:
    """Whether a select stored by `stmt` decides on `var`."""
    return any(isinstance(e, Select) and any(v is var for v in walk_expr(e.cond))
               for st in walk_stmt(stmt) if isinstance(st, Store) for e in walk_expr(st.value))
