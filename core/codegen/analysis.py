"""Small analyses codegen needs: free variables and buffers of a statement, affine strides, traps, store dtypes."""
from __future__ import annotations

from ..errors import CodegenError
from ..tir.expr import BinOp, Buffer, Cast, Expr, IntImm, Load, Select, Var
from ..tir.functor import stmt_exprs, walk_expr, walk_stmt
from ..tir.stmt import Allocate, For, LetStmt, Stmt, Store
from .llvm_types import is_float


def expr_vars(expr: Expr) -> set[Var]:
    return {e for e in walk_expr(expr) if isinstance(e, Var)}


def uses_any(expr: Expr, names: set[Var]) -> bool:
    return bool(names) and any(isinstance(e, Var) and e in names for e in walk_expr(expr))


def free_vars(stmt: Stmt) -> list[Var]:
    """Variables `stmt` reads but does not bind itself (enclosing loop and let variables), in first-use order."""
    bound: set[Var] = set()
    for s in walk_stmt(stmt):
        if isinstance(s, (For, LetStmt)):
            bound.add(s.var)
    seen: dict[Var, None] = {}
    for s in walk_stmt(stmt):
        for e in stmt_exprs(s):
            for v in walk_expr(e):
                if isinstance(v, Var) and v not in bound:
                    seen.setdefault(v)
    return list(seen)


def buffers_used(stmt: Stmt) -> list[Buffer]:
    """Buffers `stmt` loads or stores that it does not allocate itself, in first-use order."""
    local = {s.buffer for s in walk_stmt(stmt) if isinstance(s, Allocate)}
    seen: dict[Buffer, None] = {}
    for s in walk_stmt(stmt):
        if isinstance(s, Store) and s.buffer not in local:
            seen.setdefault(s.buffer)
        for e in stmt_exprs(s):
            for x in walk_expr(e):
                if isinstance(x, Load) and x.buffer not in local:
                    seen.setdefault(x.buffer)
    return list(seen)


def stride_of(expr: Expr, var: Var) -> int | None:
    """The constant c with expr == c * var + (terms free of var), or None when expr is not of that form."""
    if var not in expr_vars(expr):
        return 0
    if expr == var:
        return 1
    if isinstance(expr, BinOp) and expr.op in ("add", "sub"):
        sa, sb = stride_of(expr.a, var), stride_of(expr.b, var)
        if sa is None or sb is None:
            return None
        return sa + sb if expr.op == "add" else sa - sb
    if isinstance(expr, BinOp) and expr.op == "mul":
        for x, c in ((expr.a, expr.b), (expr.b, expr.a)):
            if isinstance(c, IntImm):
                s = stride_of(x, var)
                return None if s is None else s * c.value
        return None
    if isinstance(expr, Cast) and not is_float(expr.dtype) and not is_float(expr.value.dtype):
        # Index arithmetic is assumed not to wrap, so an integer cast keeps the stride.
        return stride_of(expr.value, var)
    return None


def may_trap(expr: Expr) -> bool:
    """Whether evaluating `expr` where the program did not could fault: a load, or an integer division
    by something other than a nonzero constant. Such select arms must not be speculated."""
    for e in walk_expr(expr):
        if isinstance(e, Load):
            return True
        if isinstance(e, BinOp) and e.op in ("div", "floordiv", "floormod", "truncmod") and not is_float(e.dtype):
            if not (isinstance(e.b, IntImm) and e.b.value != 0):
                return True
    return False


def speculation_safe(stmt: Stmt) -> bool:
    """Whether running `stmt` at points the program would skip cannot fault, given its affine accesses stay
    inside their buffers: no integer division by other than a nonzero constant, and no access whose index reads
    memory or a let-bound value (a gather's position read past the valid part can be anything), but a read with
    run-time strides (an index reading scalars at constant positions: the lengths of an argument laid out at
    them) that is a select's arm: codegen reads it only where its condition (the layout's bounds) holds."""
    lets = {s.var for s in walk_stmt(stmt) if isinstance(s, LetStmt)}
    guarded = {id(e.true_value) for s in walk_stmt(stmt) for expr in stmt_exprs(s) for e in walk_expr(expr)
               if isinstance(e, Select) and isinstance(e.true_value, Load) and _strided(e.true_value.index, lets)}
    for s in walk_stmt(stmt):
        if isinstance(s, Store) and _indirect(s.index, lets):
            return False
        for expr in stmt_exprs(s):
            for e in walk_expr(expr):
                if isinstance(e, Load) and id(e) not in guarded and _indirect(e.index, lets):
                    return False
                if isinstance(e, BinOp) and e.op in ("div", "floordiv", "floormod", "truncmod") and \
                        not is_float(e.dtype) and not (isinstance(e.b, IntImm) and e.b.value != 0):
                    return False
    return True


def _indirect(index: Expr, lets: set) -> bool:
    return any(isinstance(e, Load) or (isinstance(e, Var) and e in lets) for e in walk_expr(index))


def _strided(index: Expr, lets: set) -> bool:
    """An index whose only reads of memory are scalars at constant positions (run-time strides, not positions)."""
    return not any((isinstance(e, Load) and not isinstance(e.index, IntImm)) or (isinstance(e, Var) and e in lets)
                   for e in walk_expr(index))


def const_int(expr: Expr) -> int | None:
    return expr.value if isinstance(expr, IntImm) else None


def check_store_dtype(kernel: str, s: Store) -> None:
    if s.value.dtype != s.buffer.dtype:
        raise CodegenError(f"kernel {kernel}: storing a {s.value.dtype} value into {s.buffer.dtype} buffer "
                           f"{s.buffer.name} (insert a Cast)")
