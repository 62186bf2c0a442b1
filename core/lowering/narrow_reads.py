"""Where a kernel widens a half-size weight (core/graph/passes/narrow_weight_storage.py): inside its loads when it reads
the weight as vectors (one `vcvtph2ps` per vector), or once per call into a float32 workspace when it reads scalars
that it broadcasts (a conversion per multiply-add would cost more than the memory it saves)."""
from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

from ..graph.ir import Graph, Node
from ..tir.expr import Buffer, Expr, Load, Var
from ..tir.functor import walk_expr
from ..tir.stmt import For, ForKind, LetStmt, PrimFunc, Stmt

NARROW_STORAGE = frozenset({"float16", "bfloat16"})


def weight_widenings(nodes: Sequence[Node], graph: Graph, inputs: Sequence[str]) -> dict[str, str]:
    """Cast outputs of the group that widen one of its narrow-float inputs to float32 -> that input."""
    found = {}
    for node in nodes:
        if (node.op == "Cast" and node.inputs[0] in inputs and graph.type_of(node.inputs[0]).dtype in NARROW_STORAGE
                and graph.type_of(node.outputs[0]).dtype == "float32"):
            found[node.outputs[0]] = node.inputs[0]
    return found


def scalar_reads(func: PrimFunc, buffers: Iterable[Buffer]) -> set[Buffer]:
    """Those of `buffers` that `func` loads at least once outside any vectorized loop over the load's index."""
    wanted = set(buffers)
    found: set[Buffer] = set()
    _visit(func.body, frozenset(), wanted, found)
    return found


def _vector_vars(expr: Expr, vector_vars: frozenset) -> bool:
    return any(isinstance(e, Var) and e in vector_vars for e in walk_expr(expr))


def _visit(node, vector_vars: frozenset, wanted: set, found: set) -> None:
    if isinstance(node, Expr):
        for e in walk_expr(node):
            if isinstance(e, Load) and e.buffer in wanted and not _vector_vars(e.index, vector_vars):
                found.add(e.buffer)
        return
    if isinstance(node, For) and node.kind is ForKind.VECTORIZED:
        vector_vars = vector_vars | {node.var}
    if isinstance(node, LetStmt) and _vector_vars(node.value, vector_vars):
        vector_vars = vector_vars | {node.var}
    for field in dataclasses.fields(node) if dataclasses.is_dataclass(node) else ():
        child = getattr(node, field.name)
        for item in (child if isinstance(child, tuple) else (child,)):
            if isinstance(item, (Expr, Stmt)):
                _visit(item, vector_vars, wanted, found)
