"""Run-time index checks: an index read from a tensor (Gather, Scatter...) in range, or the kernel records it."""
# `checked_index(idx, extent)` is the position on an axis of `extent` that `idx` names (negatives count from the
# end, as ONNX says). An index outside [-extent, extent) is an error: codegen clamps it (reads and writes stay
# in bounds) and records it in the kernel's INDEX_FAULT workspace ([flag, index, extent]); the model runner
# checks the flag after the call and fails the run, naming the node (core/codegen/model_entry.py).
# lower() adds the workspace to every CPU kernel that holds a check (`with_index_fault`); the CPU runner clears its
# flag before the call. A GPU kernel (its loops bound to threads) only clamps: no runner reads a record there, and a
# GPU kernel stages nothing in global workspaces.
from __future__ import annotations

from typing import Sequence

from .expr import Buffer, Call, Expr, IntImm, Load, cast, const
from .functor import rewrite_stmt, stmt_exprs, walk_expr, walk_stmt
from .stmt import For, ForKind, PrimFunc, Stmt

INDEX_GUARD = "index_guard"
INDEX_FAULT = Buffer("index_fault", (3,), "int64")  # flag, the bad index, the axis extent


def checked_index(idx: Expr, extent: int) -> Expr:
    """`idx` as a position on an axis of `extent` (int64), checked at run time."""
    return Call(INDEX_GUARD, (cast("int64", idx), const(int(extent), "int64")), "int64")


def has_index_checks(body: Stmt) -> bool:
    return any(isinstance(e, Call) and e.name == INDEX_GUARD
               for s in walk_stmt(body) for top in stmt_exprs(s) for e in walk_expr(top))


def with_index_fault(body: Stmt, params: Sequence[Buffer]) -> tuple[Stmt, tuple[Buffer, ...]]:
    """`body` and `params` with the INDEX_FAULT workspace when the body checks indices: each check names it (so
    that outlined parallel loops capture it)."""
    if not has_index_checks(body) or INDEX_FAULT in params or _on_gpu_threads(body):
        return body, tuple(params)
    fault = Load(INDEX_FAULT, IntImm(0))

    def attach(e: Expr):
        if isinstance(e, Call) and e.name == INDEX_GUARD and len(e.args) == 2:
            return Call(INDEX_GUARD, (*e.args, fault), e.dtype)
        return None

    return rewrite_stmt(body, attach), (*params, INDEX_FAULT)


def _on_gpu_threads(body: Stmt) -> bool:
    return any(isinstance(s, For) and s.kind is ForKind.THREAD_BINDING for s in walk_stmt(body))


def uses_index_fault(func: PrimFunc) -> bool:
    return INDEX_FAULT in func.workspaces


__all__ = ["INDEX_GUARD", "INDEX_FAULT", "checked_index", "has_index_checks", "with_index_fault",
           "uses_index_fault"]
