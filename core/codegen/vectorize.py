"""VECTORIZED loops as real SIMD code, the way TVM's Ramp/Broadcast lowering does it."""
# The body is evaluated once per group of lanes with the loop variable as a lane vector. Lane-invariant
# subexpressions stay scalar (splat when combined); a load or store whose index is affine in the loop
# variable becomes one contiguous vector access (stride 1), a scalar access (stride 0) or per-lane
# accesses (any other index). Select arms that could fault are evaluated under a lane mask (masked
# loads, clamped gathers). Bodies that need control flow per lane (lane-dependent ifs, local buffers,
# stride-0 stores of lane values) fall back to a scalar loop carrying `llvm.loop.vectorize.enable`.
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

from llvmlite import ir

from ..tir.expr import BinOp, Call, Cast, Expr, Load, Not, Select, Var
from ..tir.functor import substitute
from ..tir.index_guard import INDEX_GUARD
from ..tir.stmt import For, ForKind, IfThenElse, LetStmt, Seq, Stmt, Store
from . import arith, index_guard
from .analysis import check_store_dtype, const_int, may_trap, speculation_safe, stride_of, uses_any
from .llvm_types import I1, I32, I64, const, is_float, itemsize, lanes_of, mangle, mem_type, reg_type, scalar_type

if TYPE_CHECKING:  # the emitter calls this module for its vectorized loops
    from .codegen_llvm import FunctionEmitter

# One vector instruction group covers at most this many lanes; longer loops run in chunks of the
# target's natural width (LLVM splits wide vectors into registers itself, within reason).
MAX_LANES = 64


def emit_vectorized(fe: FunctionEmitter, loop: For) -> None:
    n, length = const_int(loop.extent), None
    if n is None:  # min(n, a run-time length): the iterations past the length compute padding nobody reads,
        n, length = _capped(loop.extent)  # so they must be unable to fault (no gather, no division by a variable)
    if n is None or not vectorizable(loop.body, {loop.var}) or (length is not None and not speculation_safe(loop.body)):
        fe.serial_for(loop, fe.ctx.loop_md(("llvm.loop.vectorize.enable", True)))
        return
    if n <= 0:
        return
    if n <= MAX_LANES:  # one group, whole even when capped
        VectorBody(fe, loop.var, n, ir.Constant(reg_type(loop.var.dtype), 0)).stmt(loop.body)
        return
    width = max(2, fe.ctx.target.vector_bits // 32)
    chunks, rest = divmod(n, width)
    count = ir.Constant(I64, chunks)
    if length is not None:  # the chunks up to the one crossing the length: min(chunks, ceil(length / width))
        length = fe.emit_expr(length)
        needed = fe.b.sdiv(fe.b.add(length, ir.Constant(I64, width - 1)), ir.Constant(I64, width))
        count = fe.b.select(fe.b.icmp_signed("<", needed, count), needed, count)

    def chunk(k: ir.Value) -> None:
        base = fe.iv_value(loop.var, fe.b.mul(k, ir.Constant(I64, width), flags=["nsw"]))
        VectorBody(fe, loop.var, width, base).stmt(loop.body)

    fe.loop(ir.Constant(I64, 0), count, chunk, f"{loop.var.name}.vchunk")
    if rest:
        last = lambda: VectorBody(fe, loop.var, rest, ir.Constant(reg_type(loop.var.dtype), chunks * width)).stmt(  # noqa: E731
            loop.body)
        if length is None:
            last()
        else:
            with fe.b.if_then(fe.b.icmp_signed(">", length, ir.Constant(I64, chunks * width))):
                last()


def _capped(extent: Expr) -> tuple[Optional[int], Optional[Expr]]:
    """(n, length) of an int64 extent min(n, length) with a constant n (a loop that stops at a run-time length,
    core/te/run_time_bounds.py); (None, None) otherwise."""
    if isinstance(extent, BinOp) and extent.op == "min" and extent.dtype == "int64":
        for static, length in ((extent.a, extent.b), (extent.b, extent.a)):
            n = const_int(static)
            if n is not None and const_int(length) is None and length.dtype == "int64":
                return n, length
    return None, None


def vectorizable(s: Stmt, lane_vars: set[Var]) -> bool:
    """Whether `s` can run with the variables in `lane_vars` as lane vectors (straight-line enough)."""
    if isinstance(s, Store):
        if uses_any(s.value, lane_vars) and not uses_any(s.index, lane_vars):
            return False  # lanes would race on one element (a reduction): leave it to the loop vectorizer
        return True
    if isinstance(s, Seq):
        return all(vectorizable(x, lane_vars) for x in s.stmts)
    if isinstance(s, LetStmt):
        inner = lane_vars | {s.var} if uses_any(s.value, lane_vars) else lane_vars - {s.var}
        return vectorizable(s.body, inner)
    if isinstance(s, IfThenElse):
        return not uses_any(s.cond, lane_vars) and all(
            vectorizable(x, lane_vars) for x in (s.then_case, s.else_case) if x is not None)
    if isinstance(s, For):
        return (s.kind is not ForKind.VECTORIZED and not uses_any(s.extent, lane_vars)
                and vectorizable(s.body, lane_vars - {s.var}))
    return False  # Allocate and anything unknown


class VectorBody:
    """Emits one group of `lanes` iterations of a vectorizable body, starting at iteration `base`."""

    def __init__(self, fe: FunctionEmitter, var: Var, lanes: int, base: ir.Value):
        self.fe, self.b, self.var, self.lanes, self.base = fe, fe.b, var, lanes, base
        self.vec_vars: dict[Var, ir.Value] = {}
        self.lane_defs: dict[Var, Expr] = {}  # lane-dependent let variables, expanded to the loop variable
        self.mask: ir.Value | None = None  # lanes whose select arm is being evaluated
        self._ramp = self._make_ramp()  # here, where it dominates every use (not inside a guarded select arm)

    # ------------------------------------------------------------ helpers

    def lane_vars(self) -> set[Var]:
        return {self.var, *self.vec_vars}

    def varies(self, e: Expr) -> bool:
        return uses_any(e, self.lane_vars())

    def ramp(self) -> ir.Value:
        """The loop variable as a vector: base + <0, 1, ..., lanes-1>."""
        return self._ramp

    def _make_ramp(self) -> ir.Value:
        if self.lanes == 1:  # a one-lane body is scalar code: the loop variable is its base
            return self.base
        t = reg_type(self.var.dtype, self.lanes)
        steps = ir.Constant(t, [ir.Constant(t.element, i) for i in range(self.lanes)])
        if isinstance(self.base, ir.Constant) and self.base.constant == 0:
            return steps
        return self.b.add(arith.splat(self.b, self.base, self.lanes), steps)

    def full(self, v: ir.Value) -> ir.Value:
        return arith.splat(self.b, v, self.lanes)

    def scalar_index(self, index: Expr) -> ir.Value:
        """The index's value in lane 0, computed with scalar code."""
        fe = self.fe
        return _with_binding(fe, self.var, self.base, lambda: fe.emit_index(substitute(index, self.lane_defs)))

    def any_active(self) -> ir.Value:
        m = self.mask
        return self.b.call(arith.declare(self.b.module, f"llvm.vector.reduce.or.{mangle(m.type)}", I1, [m.type]), [m])

    def guarded(self, cond: ir.Value, then: Callable[[], ir.Value], zero: ir.Value) -> ir.Value:
        """then() if scalar i1 `cond` else `zero`, with real control flow (the arm may fault)."""
        b, fn = self.b, self.fe.fn
        t_bb, merge = fn.append_basic_block("vsel.t"), fn.append_basic_block("vsel.end")
        start = b.block
        b.cbranch(cond, t_bb, merge)
        b.position_at_end(t_bb)
        tv = then()
        t_end = b.block
        b.branch(merge)
        b.position_at_end(merge)
        phi = b.phi(tv.type)
        phi.add_incoming(tv, t_end)
        phi.add_incoming(arith.splat(b, zero, lanes_of(tv)) if lanes_of(tv) > 1 else zero, start)
        return phi

    def under_mask(self, lanes_on: ir.Value, fn: Callable[[], ir.Value]) -> ir.Value:
        old = self.mask
        self.mask = lanes_on if old is None else self.b.and_(old, lanes_on)
        try:
            return fn()
        finally:
            self.mask = old

    # ------------------------------------------------------------ statements

    def stmt(self, s: Stmt) -> None:
        if isinstance(s, Store):
            self.store(s)
        elif isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, LetStmt):
            self.let(s)
        elif isinstance(s, IfThenElse):
            cond = arith.to_bool(self.b, s.cond.dtype, self.fe.emit_expr(s.cond))
            if s.else_case is None:
                with self.b.if_then(cond):
                    self.stmt(s.then_case)
            else:
                with self.b.if_else(cond) as (then, otherwise):
                    with then:
                        self.stmt(s.then_case)
                    with otherwise:
                        self.stmt(s.else_case)
        elif isinstance(s, For):
            self.inner_for(s)
        else:  # vectorizable() rules out the rest
            raise AssertionError(f"unexpected {type(s).__name__} in a vector body")

    def let(self, s: LetStmt) -> None:
        if not self.varies(s.value):
            _with_binding(self.fe, s.var, self.fe.emit_expr(s.value), lambda: self.stmt(s.body))
            return
        old_v, old_d = self.vec_vars.get(s.var), self.lane_defs.get(s.var)
        self.vec_vars[s.var] = self.full(self.expr(s.value))
        self.lane_defs[s.var] = substitute(s.value, self.lane_defs)
        try:
            self.stmt(s.body)
        finally:
            for table, old in ((self.vec_vars, old_v), (self.lane_defs, old_d)):
                if old is None:
                    table.pop(s.var, None)
                else:
                    table[s.var] = old

    def inner_for(self, s: For) -> None:
        fe = self.fe
        n = const_int(s.extent)
        if s.kind is ForKind.UNROLLED and n is not None and n <= 64:
            for i in range(n):
                _with_binding(fe, s.var, ir.Constant(reg_type(s.var.dtype), i), lambda: self.stmt(s.body))
            return
        fe.loop(ir.Constant(I64, 0), fe.emit_index(s.extent),
                lambda iv: _with_binding(fe, s.var, fe.iv_value(s.var, iv), lambda: self.stmt(s.body)), s.var.name)

    def store(self, s: Store) -> None:
        check_store_dtype(self.fe.kernel_name, s)
        value = self.expr(s.value)
        stride = stride_of(substitute(s.index, self.lane_defs), self.var)
        fe, b = self.fe, self.b
        if stride == 0:
            if lanes_of(value) > 1:  # an index like j - j: the last lane's write is the one that stays
                value = b.extract_element(value, ir.Constant(I32, self.lanes - 1))
            fe.store_elem(s.buffer, fe.element_ptr(s.buffer, self.scalar_index(s.index)), value)
        elif stride == 1:
            fe.store_elem(s.buffer, fe.element_ptr(s.buffer, self.scalar_index(s.index)), self.full(value))
        else:  # scatter, lane by lane in order so the last lane wins like the scalar loop
            idx = self.full(fe.index_i64(s.index, self.expr(s.index)))
            value = self.full(value)
            for i in range(self.lanes):
                lane = ir.Constant(I32, i)
                ptr = fe.element_ptr(s.buffer, b.extract_element(idx, lane))
                fe.store_elem(s.buffer, ptr, b.extract_element(value, lane))

    # ------------------------------------------------------------ expressions

    def expr(self, e: Expr) -> ir.Value:
        """The value of `e` for every lane: a vector, or a scalar when every lane has the same value."""
        b = self.b
        if not self.varies(e):
            if self.mask is not None and may_trap(e):
                return self.guarded(self.any_active(), lambda: self.fe.emit_expr(e), const(e.dtype, 0))
            return self.fe.emit_expr(e)
        if isinstance(e, Var):
            return self.ramp() if e == self.var else self.vec_vars[e]
        if isinstance(e, Load):
            return self.load(e)
        if isinstance(e, BinOp):
            return self.binop(e)
        if isinstance(e, Not):
            return b.xor(arith.to_bool(b, e.a.dtype, self.expr(e.a)), const("bool", 1, self.lanes))
        if isinstance(e, Cast):
            return arith.cast(b, e.value.dtype, e.dtype, self.expr(e.value))
        if isinstance(e, Select):
            cond = arith.to_bool(b, e.cond.dtype, self.expr(e.cond))
            return self.select(cond, e.true_value, e.false_value)
        if isinstance(e, Call):
            if e.name == "reinterpret":
                return arith.reinterpret(b, e.args[0].dtype, e.dtype, self.expr(e.args[0]))
            if e.name == INDEX_GUARD:
                return index_guard.emit_vector(self, e)
            args = arith.unify(b, *(self.expr(a) for a in e.args))
            return arith.intrinsic(b, e.name, e.args[0].dtype, args)
        return self.fe.emit_expr(e)  # constants

    def binop(self, e: BinOp) -> ir.Value:
        b = self.b
        if e.op in ("and", "or"):
            lhs = arith.to_bool(b, e.a.dtype, self.expr(e.a))
            if may_trap(e.b):  # short-circuit: the right side only for lanes that need it
                t, f = (e.b, False) if e.op == "and" else (True, e.b)
                return self.select(lhs, t, f, bool_result=True)
            rhs = arith.to_bool(b, e.b.dtype, self.expr(e.b))
            return arith.binop(b, e.op, "bool", lhs, rhs)
        x, y = self.expr(e.a), self.expr(e.b)
        divides = e.op in ("div", "floordiv", "floormod", "truncmod") and not is_float(e.dtype)
        if divides and self.mask is not None and lanes_of(y) > 1:
            y = b.select(self.mask, y, const(e.dtype, 1, self.lanes))  # idle lanes must not divide by zero
        return arith.binop(b, e.op, e.a.dtype, x, y, const_int(e.b))

    def select(self, cond: ir.Value, t, f, bool_result: bool = False) -> ir.Value:
        """select(cond, t, f); arms that may fault run only for the lanes (or the branch) that take them."""
        b = self.b

        def value(x) -> ir.Value:
            if isinstance(x, bool):
                return const("bool", int(x))
            v = self.expr(x)
            return arith.to_bool(b, x.dtype, v) if bool_result else v

        risky = [isinstance(x, Expr) and may_trap(x) for x in (t, f)]
        if lanes_of(cond) > 1 and isinstance(t, Load) and risky[0] and not risky[1] and self.mask is None:
            return self._whole_or_masked(cond, lambda: self.full(value(t)),
                                         lambda: self._lanewise(cond, t, f, value, risky))
        if lanes_of(cond) == 1 and any(risky):
            zero = _zero_like(t, f, bool_result)
            tv = self.guarded(cond, lambda: self.full(value(t)), zero)
            fv = self.guarded(b.xor(cond, ir.Constant(I1, 1)), lambda: self.full(value(f)), zero)
            return b.select(cond, tv, fv)
        return self._lanewise(cond, t, f, value, risky)

    def _lanewise(self, cond: ir.Value, t, f, value: Callable, risky: list[bool]) -> ir.Value:
        b = self.b
        if lanes_of(cond) > 1:
            tv = self.under_mask(cond, lambda: value(t)) if risky[0] else value(t)
            fv = self.under_mask(b.xor(cond, const("bool", 1, self.lanes)), lambda: value(f)) if risky[1] else value(f)
        else:
            tv, fv = value(t), value(f)
        tv, fv = arith.unify(b, tv, fv)
        if lanes_of(cond) > 1:  # a lane-varying condition needs both arms as full vectors
            tv, fv = self.full(tv), self.full(fv)
        return b.select(cond, tv, fv)

    def _whole_or_masked(self, cond: ir.Value, whole: Callable[[], ir.Value],
                         masked: Callable[[], ir.Value]) -> ir.Value:
        """A read under a lane condition that lanes usually all meet (a laid-out read inside its run-time length, but
        in the tile crossing it): when every lane does, the plain vector read (no mask), else `masked`. Only a bare
        load, so the code it doubles stays one read."""
        b = self.b
        all_on = b.call(arith.declare(b.module, f"llvm.vector.reduce.and.{mangle(cond.type)}", I1, [cond.type]), [cond])
        return self.fe.diamond(all_on, whole, masked, ("vsel.whole", "vsel.masked", "vsel.join"))

    def load(self, e: Load) -> ir.Value:
        fe, b = self.fe, self.b
        stride = stride_of(substitute(e.index, self.lane_defs), self.var)
        if stride == 1:
            ptr = fe.element_ptr(e.buffer, self.scalar_index(e.index))
            if self.mask is None:
                return fe.load_elem(e.buffer, ptr, self.lanes)
            vt = ir.VectorType(mem_type(e.buffer.dtype), self.lanes)
            fn = arith.declare(b.module, f"llvm.masked.load.{mangle(vt)}.p0", vt,
                               [ptr.type, I32, self.mask.type, vt])
            raw = b.call(fn, [ptr, ir.Constant(I32, itemsize(e.buffer.dtype)), self.mask, ir.Constant(vt, None)])
            return fe.from_mem(e.buffer.dtype, raw)
        # Gather lane by lane; idle lanes read element 0, which always exists, instead of faulting.
        idx = self.full(fe.index_i64(e.index, self.expr(e.index)))
        if self.mask is None:
            from .intrinsics import byte_table_lookup  # a 256-entry byte table: one permute per 64 lanes

            looked_up = byte_table_lookup(fe, e.buffer, idx)
            if looked_up is not None:
                return looked_up
        if self.mask is not None:
            idx = b.select(self.mask, idx, ir.Constant(idx.type, None))
        rt = scalar_type(reg_type(e.buffer.dtype))
        return arith.per_lane(b, lambda i: fe.load_elem(e.buffer, fe.element_ptr(e.buffer, i)), rt, idx)


def _with_binding(fe: FunctionEmitter, var: Var, value: ir.Value, fn: Callable[[], object]):
    out = []
    fe.bound(var, value, lambda: out.append(fn()))
    return out[0]


def _zero_like(t, f, bool_result: bool) -> ir.Value:
    if bool_result:
        return const("bool", 0)
    dtype = t.dtype if isinstance(t, Expr) else f.dtype
    return const(dtype, 0)
