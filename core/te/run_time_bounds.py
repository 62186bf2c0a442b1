"""Run-time loop bounds: a stage whose points past a run-time length (along some of its axes) are padding that
no reader uses runs its loops over those axes only up to the length. A loop that alone walks the axis (plain,
or the outer loop of a split) takes ceil(length / step) as its extent, a symbolic For extent; a fused loop, or
one whose tile starts further in, skips each tile that starts past the length. Vector, unrolled, bound and
tensorized loops and the loops inside a reduction keep their static extents, so the schedule's micro-kernels
stay as they are (a tile that crosses the length is computed whole: its points past it are padding).
A sum whose terms multiply by an input that holds 0 past a length along the summed axis (a mask's output, such as
attention weights before their product with the values) stops there too."""
from __future__ import annotations

from typing import Callable, Sequence

from ..tir.expr import BinOp, Cast, Expr, IntImm, Var, binop, cast, minimum
from ..tir.functor import substitute, walk_expr
from ..tir.simplify import simplify
from ..tir.stmt import ForKind
from .schedule import Fuse, Schedule, Split, Stage
from .tensor import ExternOp, IterVar, Reduce, TensorRead

SKIPPABLE_KINDS = (ForKind.SERIAL, ForKind.PARALLEL)


def skippable_axes(sch: Schedule, reads_of: Callable) -> dict[int, dict[int, Expr]]:
    """Per stage (the id of its op), axis -> length: a kernel output's own run-time bounds, and a producer's
    axis when every stage reading it reads it at the reader's own point along an axis the reader skips
    (so its points past the length reach only points that are padding themselves). `reads_of(expr, op)` lists
    the index tuples at which `expr` reads `op`, through inlined stages."""
    stages = [s for s in sch.stages if not s.inlined and not isinstance(s.op, ExternOp)]
    readers = {id(p.op): [(r, reads_of(r.body, p.op)) for r in sch.stages if not r.inlined and r is not p]
               for p in stages}
    skipped: dict[int, dict[int, Expr]] = {}
    changed = True
    while changed:  # readers first: a producer's axes follow its readers'
        changed = False
        for p in reversed(stages):
            if p.attach is not None and not p.after_producer:  # computed per tile of its consumer
                continue
            axes = dict(p.run_time_bounds) if p.run_time_bounds else None
            for r, reads in readers[id(p.op)]:
                if not reads:
                    continue
                # a kernel output that is a mask's output holds its fill past the length whatever it reads there
                own = {**{a: n for a, (n, _) in sch.run_time_fills.get(id(r.op), {}).items()}, **skipped.get(id(r.op), {})}
                ok = {a: length for a, length in own.items()
                      if len(r.op.axis) == len(p.op.axis) and all(_is_var(index[a], r.op.axis[a].var)
                                                                  for index in reads)}
                axes = ok if axes is None else {a: n for a, n in axes.items() if ok.get(a) is n}
            axes = axes or {}
            if axes != skipped.get(id(p.op), {}):
                skipped[id(p.op)] = axes
                changed = True
    return {k: v for k, v in skipped.items() if v}


def summed_lengths(stage: Stage, fills: dict) -> dict[IterVar, Expr]:
    """Reduce axis -> length, for a sum whose every term is a product with a read, at that axis, of an input that
    holds 0 past the length there (`fills`: Schedule.run_time_fills): the terms past it add nothing."""
    body = stage.body
    if not fills or not isinstance(body, Reduce) or body.combiner != "sum":
        return {}
    found: dict[IterVar, Expr] = {}
    for factor in _factors(body.source):
        if not isinstance(factor, TensorRead):
            continue
        for axis, (length, fill) in fills.get(id(factor.tensor.op), {}).items():
            axis_of = next((r for r in body.axis if _is_var(factor.indices[axis], r.var)), None)
            if fill == 0 and axis_of is not None:
                found.setdefault(axis_of, length)
    return found


def loop_bounds(stage: Stage, leaves: Sequence[IterVar], values: dict, lengths: dict[int, Expr], outer: int,
                extents: dict[IterVar, int], summed: dict[IterVar, Expr] = {}, fixed: frozenset = frozenset()
                ) -> tuple[list[Expr], dict[IterVar, Expr]]:
    """Guards and symbolic extents that stop `stage`'s loops at the run-time `lengths` (axis -> int64 length,
    already a Load) among its first `outer` leaves (those outside any reduction), and its reduce loops at `summed`
    (reduce axis -> length: summed_lengths'): (conditions, leaf -> extent). The `fixed` leaves keep their extents
    (a guard instead)."""
    fused = {rel.fused for rel in stage.relations if isinstance(rel, Fuse)}
    conds: list[Expr] = []
    bounded: dict[IterVar, Expr] = {}
    for axis, length in summed.items():  # the axis itself a leaf, or the outer leaf of its split
        leaf, step = (axis, 1) if axis in leaves else next(
            ((rel.outer, rel.factor) for rel in stage.relations if isinstance(rel, Split) and rel.parent is axis
             and rel.outer in leaves), (None, 0))
        if leaf is not None and stage.annotations.get(leaf, ForKind.SERIAL) in SKIPPABLE_KINDS \
                and leaf not in stage.tensorized:
            bound = cast(leaf.var.dtype, length)
            bounded[leaf] = minimum(IntImm(extents[leaf], leaf.var.dtype), (bound + (step - 1)) // step)
    for axis, length in sorted(lengths.items()):
        value = values[stage.op.axis[axis]]
        for d, iv in enumerate(leaves[:outer]):
            if not _mentions(value, iv.var) or stage.annotations.get(iv, ForKind.SERIAL) not in SKIPPABLE_KINDS \
                    or iv in stage.bindings or iv in stage.tensorized or iv in bounded:
                continue
            # the first point of the tile this leaf's iteration starts: deeper leaves at 0
            start = simplify(substitute(value, {leaf.var: IntImm(0, leaf.var.dtype) for leaf in leaves[d + 1:]}))
            bound = cast(iv.var.dtype, length)
            step = None if iv in fused or iv in fixed else _step(start, iv.var)
            if step is not None:
                bounded[iv] = minimum(IntImm(extents[iv], iv.var.dtype), (bound + (step - 1)) // step)
            else:
                conds.append(binop("lt", start, bound))
    return conds, bounded


def _step(start: Expr, var: Var):
    """c when `start` is var * c (c > 0) and nothing else, else None."""
    if any(isinstance(e, Var) and e is not var for e in walk_expr(start)) or any(
            isinstance(e, BinOp) and e.op not in ("add", "mul") for e in walk_expr(start)):
        return None
    at = [simplify(substitute(start, {var: IntImm(k, var.dtype)})) for k in (0, 1, 2)]
    if not all(isinstance(v, IntImm) for v in at) or at[0].value != 0 or at[1].value <= 0 \
            or at[2].value != 2 * at[1].value:
        return None
    return at[1].value


def _factors(expr: Expr) -> list[Expr]:
    """The factors of a product (through casts, which keep a 0 a 0)."""
    if isinstance(expr, BinOp) and expr.op == "mul":
        return _factors(expr.a) + _factors(expr.b)
    if isinstance(expr, Cast):
        return _factors(expr.value)
    return [expr]


def _is_var(index: Expr, var: Var) -> bool:
    return index is var or (isinstance(index, Var) and index == var)


def _mentions(expr: Expr, var: Var) -> bool:
    return any(e is var for e in walk_expr(expr))


__all__ = ["skippable_axes", "summed_lengths", "loop_bounds"]
