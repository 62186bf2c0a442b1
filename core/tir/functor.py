"""Generic traversal of TIR: post-order rewriting of expressions and statements, and substitution."""
from __future__ import annotations

import dataclasses
from typing import Callable, Iterator, Mapping, Optional

from .expr import BinOp, Call, Cast, Expr, Load, Not, Select, Var
from .stmt import Allocate, Barrier, For, IfThenElse, IntrinsicCall, LetStmt, Seq, Stmt, Store

ExprFn = Callable[[Expr], Optional[Expr]]


def rewrite_expr(expr: Expr, fn: ExprFn) -> Expr:
    """Rebuild `expr` bottom-up; `fn` sees each rebuilt node and may return a replacement (or None)."""
    if isinstance(expr, BinOp):
        a, b = rewrite_expr(expr.a, fn), rewrite_expr(expr.b, fn)
        if a is not expr.a or b is not expr.b:
            expr = BinOp(expr.op, a, b)
    elif isinstance(expr, Not):
        a = rewrite_expr(expr.a, fn)
        if a is not expr.a:
            expr = Not(a)
    elif isinstance(expr, Cast):
        v = rewrite_expr(expr.value, fn)
        if v is not expr.value:
            expr = Cast(expr.dtype, v)
    elif isinstance(expr, Select):
        c, t, f = (rewrite_expr(e, fn) for e in (expr.cond, expr.true_value, expr.false_value))
        if c is not expr.cond or t is not expr.true_value or f is not expr.false_value:
            expr = Select(c, t, f)
    elif isinstance(expr, Call):
        args = tuple(rewrite_expr(a, fn) for a in expr.args)
        if any(x is not y for x, y in zip(args, expr.args)):
            expr = Call(expr.name, args, expr.dtype)
    elif isinstance(expr, Load):
        i = rewrite_expr(expr.index, fn)
        if i is not expr.index:
            expr = Load(expr.buffer, i)
    elif hasattr(expr, "rewrite_children"):  # TE-level nodes (TensorRead, Reduce) know their children
        expr = expr.rewrite_children(lambda e: rewrite_expr(e, fn))
    out = fn(expr)
    return expr if out is None else out


def rewrite_stmt(stmt: Stmt, expr_fn: ExprFn, stmt_fn: Optional[Callable[[Stmt], Optional[Stmt]]] = None) -> Stmt:
    """Rewrite every expression in `stmt` with `expr_fn`, then offer each rebuilt statement to `stmt_fn`."""
    rx = lambda e: rewrite_expr(e, expr_fn)  # noqa: E731
    rs = lambda s: rewrite_stmt(s, expr_fn, stmt_fn)  # noqa: E731
    if isinstance(stmt, Store):
        new: Stmt = Store(stmt.buffer, rx(stmt.index), rx(stmt.value))
    elif isinstance(stmt, For):
        new = For(stmt.var, rx(stmt.extent), stmt.kind, rs(stmt.body), stmt.annotations)
    elif isinstance(stmt, Seq):
        new = Seq(tuple(rs(s) for s in stmt.stmts))
    elif isinstance(stmt, IfThenElse):
        new = IfThenElse(rx(stmt.cond), rs(stmt.then_case), rs(stmt.else_case) if stmt.else_case is not None else None)
    elif isinstance(stmt, LetStmt):
        new = LetStmt(stmt.var, rx(stmt.value), rs(stmt.body))
    elif isinstance(stmt, Allocate):
        new = Allocate(stmt.buffer, rs(stmt.body))
    elif isinstance(stmt, Barrier):
        new = stmt
    elif isinstance(stmt, IntrinsicCall):
        new = IntrinsicCall(stmt.name, tuple(rx(o) for o in stmt.operands), stmt.strides)
    else:
        raise TypeError(f"unknown statement {type(stmt).__name__}")
    if stmt_fn is not None:
        out = stmt_fn(new)
        if out is not None:
            return out
    return new


def substitute(expr: Expr, mapping: Mapping[Var, Expr]) -> Expr:
    if not mapping:
        return expr
    return rewrite_expr(expr, lambda e: mapping.get(e) if isinstance(e, Var) else None)


def substitute_stmt(stmt: Stmt, mapping: Mapping[Var, Expr]) -> Stmt:
    return rewrite_stmt(stmt, lambda e: mapping.get(e) if isinstance(e, Var) else None)


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else ()
        _FIELD_NAMES[cls] = names
    return names


def walk_expr(expr: Expr) -> Iterator[Expr]:
    """Pre-order iteration over an expression tree. An explicit stack and per-class field names, not nested
    generators and dataclasses.fields per node: codegen's analyses walk millions of nodes per model."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        children = []
        for name in _field_names(type(node)):
            child = getattr(node, name)
            if isinstance(child, Expr):
                children.append(child)
            elif isinstance(child, tuple):
                children.extend(c for c in child if isinstance(c, Expr))
        if children:
            children.reverse()
            stack.extend(children)


def walk_stmt(stmt: Stmt) -> Iterator[Stmt]:
    yield stmt
    if isinstance(stmt, (For, LetStmt, Allocate)):
        yield from walk_stmt(stmt.body)
    elif isinstance(stmt, Seq):
        for s in stmt.stmts:
            yield from walk_stmt(s)
    elif isinstance(stmt, IfThenElse):
        yield from walk_stmt(stmt.then_case)
        if stmt.else_case is not None:
            yield from walk_stmt(stmt.else_case)


def stmt_exprs(stmt: Stmt) -> Iterator[Expr]:
    """Every top-level expression held directly by one statement (not its children statements)."""
    if isinstance(stmt, Store):
        yield stmt.index
        yield stmt.value
    elif isinstance(stmt, For):
        yield stmt.extent
    elif isinstance(stmt, IfThenElse):
        yield stmt.cond
    elif isinstance(stmt, LetStmt):
        yield stmt.value
    elif isinstance(stmt, IntrinsicCall):
        yield from stmt.operands
