"""The loop program: expressions, statements, kernels (PrimFunc), traversal, simplifier, printer."""
from .expr import (Buffer, BinOp, Call, Cast, Expr, FloatImm, IntImm, Load, Not, Select, Var, as_expr, call, cast,
                   const, eq, is_float, logical_and, logical_or, maximum, minimum, ne, select)
from .stmt import Allocate, For, ForKind, IfThenElse, LetStmt, PrimFunc, Seq, Stmt, Store, seq
from .printer import format_func, format_stmt
