"""Human-readable text of a loop program, for DEBUG output and test failure messages."""
from __future__ import annotations

from .stmt import Allocate, Barrier, For, ForKind, IfThenElse, IntrinsicCall, LetStmt, PrimFunc, Seq, Stmt, Store


def format_stmt(stmt: Stmt, indent: int = 0) -> str:
    pad = "  " * indent
    if isinstance(stmt, Store):
        return f"{pad}{stmt.buffer.name}[{stmt.index}] = {stmt.value}"
    if isinstance(stmt, For):
        kind = "" if stmt.kind is ForKind.SERIAL else f" {stmt.kind.value}"
        notes = "".join(f" [{k}={v}]" for k, v in stmt.annotations)
        return f"{pad}for{kind} {stmt.var} in 0..{stmt.extent}{notes}:\n" + format_stmt(stmt.body, indent + 1)
    if isinstance(stmt, Seq):
        return "\n".join(format_stmt(s, indent) for s in stmt.stmts)
    if isinstance(stmt, IfThenElse):
        text = f"{pad}if {stmt.cond}:\n" + format_stmt(stmt.then_case, indent + 1)
        if stmt.else_case is not None:
            text += f"\n{pad}else:\n" + format_stmt(stmt.else_case, indent + 1)
        return text
    if isinstance(stmt, LetStmt):
        return f"{pad}let {stmt.var} = {stmt.value}\n" + format_stmt(stmt.body, indent)
    if isinstance(stmt, Allocate):
        b = stmt.buffer
        return f"{pad}allocate {b.name}: {b.dtype}[{b.numel}] ({b.scope})\n" + format_stmt(stmt.body, indent)
    if isinstance(stmt, Barrier):
        return f"{pad}barrier"
    if isinstance(stmt, IntrinsicCall):
        return f"{pad}{stmt.name}({', '.join(f'&{o}' for o in stmt.operands)})"
    return f"{pad}<{type(stmt).__name__}>"


def format_func(func: PrimFunc) -> str:
    params = ", ".join(f"{b.name}: {b.dtype}{list(b.shape)}" for b in func.params)
    return f"def {func.name}({params}):\n" + format_stmt(func.body, 1)
