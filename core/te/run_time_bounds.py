"""Run-time loop bounds: loops that stop at a run-time length read from a kernel argument."""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

from ..tir.expr import BinOp, Call, Cast, Expr, FloatImm, IntImm, Var, binop, cast, minimum
from ..tir.functor import substitute, walk_expr
from ..tir.simplify import simplify
from ..tir.stmt import ForKind
from .schedule import Fuse, Schedule, Split, Stage
from .tensor import ComputeOp, ExternOp, IterVar, Reduce, TensorRead

# A stage whose points past a run-time length (along some of its axes) are padding that no reader uses runs its
# loops over those axes only up to the length: a loop that alone walks the axis (plain, or the outer loop of a
# split) takes ceil(length / step) as its extent, a symbolic For extent; a fused loop, or one whose tile starts
# further in, skips each tile that starts past the length. A vector loop that alone walks the axis (an extent no
# vector width divides: 257 keys), a row of accumulators inside a reduction too, takes min(extent, length), which
# codegen runs in whole vectors up to the one crossing the length (core/codegen/vectorize.py). Other vector loops,
# unrolled, bound and tensorized loops and the other loops inside a reduction keep their static extents, so the
# schedule's micro-kernels stay as they are (a tile that crosses the length is computed whole: its points past it
# are padding). A sum whose terms multiply by something
# that holds 0 past a length along the summed axis (a mask's output, such as attention weights before their product
# with the values; exp(x - max) of an x holding -inf there: a softmax's sum), and a max of something holding -inf
# there, stop there too.
SKIPPABLE_KINDS = (ForKind.SERIAL, ForKind.PARALLEL)


def skippable_axes(sch: Schedule, reads_of: Callable) -> dict[int, dict[int, Expr]]:
    """Per stage (the id of its op), axis -> length: a kernel output's own run-time bounds, and a producer's
    axis when every stage reading it reads it along that axis at the reader's own point along an axis the reader
    skips, or at that point // c (a panel of packed columns: it stops at ceil(length / c)), so its points past the
    length reach only points that are padding themselves. `reads_of(expr, op)` lists the index tuples at which
    `expr` reads `op`, through inlined stages."""
    stages = [s for s in sch.stages if not s.inlined and not isinstance(s.op, ExternOp)]
    readers = {id(p.op): [(r, reads_of(r.body, p.op)) for r in sch.stages if not r.inlined and r is not p]
               for p in stages}
    skipped: dict[int, dict[int, Expr]] = {}
    divided: dict[tuple[int, int], Expr] = {}  # (id of a length, c) -> ceil(length / c), one expression each
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
                ok: dict[int, Expr] = {}
                for a, length in own.items():
                    for b in range(len(p.op.axis)):
                        scales = {_read_scale(index[b], r.op.axis[a].var) for index in reads}
                        if len(scales) == 1 and None not in scales:
                            c = scales.pop()
                            ok.setdefault(b, length if c == 1 else
                                          divided.setdefault((id(length), c), (length + (c - 1)) // c))
                axes = ok if axes is None else {a: n for a, n in axes.items() if ok.get(a) is n}
            axes = axes or {}
            if axes != skipped.get(id(p.op), {}):
                skipped[id(p.op)] = axes
                changed = True
    return {k: v for k, v in skipped.items() if v}


def _read_scale(index: Expr, var: Var) -> Optional[int]:
    """1 when `index` is `var`, c when it is var // c (c > 0), else None."""
    if _is_var(index, var):
        return 1
    if isinstance(index, BinOp) and index.op == "floordiv" and _is_var(index.a, var) and isinstance(index.b, IntImm) \
            and index.b.value > 0:
        return index.b.value
    return None


def derived_fills(sch: Schedule, fills: dict, skipped: dict) -> dict:
    """`fills` (Schedule.run_time_fills) plus the stages computed in full along an axis that hold a number past a
    length because what they read there does: exp(x - max) is 0 where x holds -inf (finite other operands
    assumed: a NaN there would make the unbounded kernel's row NaN too)."""
    found = dict(fills)
    for stage in sch.stages:
        if stage.inlined or stage.attach is not None or isinstance(stage.op, ExternOp) or id(stage.op) in found \
                or isinstance(stage.body, Reduce):
            continue
        axes = {}
        for read in (e for e in walk_expr(stage.body) if isinstance(e, TensorRead)):
            for axis, (length, fill) in found.get(id(read.tensor.op), {}).items():
                if axis < len(stage.op.axis) and _is_var(read.indices[axis], stage.op.axis[axis].var) \
                        and axis not in skipped.get(id(stage.op), {}):
                    value = _certain(stage.body, read.tensor.op, axis, fill)
                    if value is not None:
                        axes.setdefault(axis, (length, value))
        if axes:
            found[id(stage.op)] = axes
    return found


def clipped_stages(sch: Schedule, fills: dict) -> dict[int, dict[int, tuple[Expr, float]]]:
    """The stages among `fills` (derived_fills') that hold a number past a length and that only this kernel sees,
    computed whole on their own (not inlined, not per tile of a consumer, not a kernel output): a softmax's exp.
    They stop at the length, and the lowering reads them through select(index < length, read, that number), which
    is what they would have held there, so their readers (the sum's lanes, the normalization) need not stop."""
    outputs = {id(t.op) for t in sch.outputs}
    return {id(s.op): fills[id(s.op)] for s in sch.stages
            if id(s.op) in fills and isinstance(s.op, ComputeOp) and not isinstance(s.body, Reduce)
            and not s.inlined and s.attach is None and s.scope == "global" and id(s.op) not in outputs}


def _certain(expr: Expr, op, axis: int, fill: float):
    """The number `expr` is wherever its reads of `op` (at their own point along `axis`) are `fill`, or None."""
    if isinstance(expr, TensorRead):
        return fill if expr.tensor.op is op else None
    if isinstance(expr, FloatImm):
        return expr.value
    if isinstance(expr, Cast):
        return _certain(expr.value, op, axis, fill)
    if isinstance(expr, Call) and expr.name == "exp" and len(expr.args) == 1:
        return 0.0 if _certain(expr.args[0], op, axis, fill) == -math.inf else None
    if isinstance(expr, BinOp) and expr.op in ("add", "sub"):  # -inf plus or minus a (finite) other value
        for inf, other in ((expr.a, expr.b),) + (((expr.b, expr.a),) if expr.op == "add" else ()):
            if _certain(inf, op, axis, fill) == -math.inf and not any(
                    isinstance(e, TensorRead) and e.tensor.op is op for e in walk_expr(other)):
                return -math.inf
    return None


def summed_lengths(stage: Stage, fills: dict) -> dict[IterVar, tuple[Expr, int]]:
    """Reduce axis -> (length, step), for a sum whose every term is a product with a read of something holding 0
    past the length, or a max of a read of something holding -inf there (`fills`: derived_fills'), at that axis
    read at the reduce variable (step 1) or at var * step + a lane (a spatial axis narrower than step: the
    partial sums of core/kernels/reduce_lanes.py): the terms past it change nothing."""
    body = stage.body
    if not fills or not isinstance(body, Reduce) or body.combiner not in ("sum", "max"):
        return {}
    factors = _factors(body.source) if body.combiner == "sum" else [_uncast(body.source)]
    neutral = 0.0 if body.combiner == "sum" else -math.inf
    found: dict[IterVar, tuple[Expr, int]] = {}
    for factor in factors:
        if not isinstance(factor, TensorRead):
            continue
        for axis, (length, fill) in fills.get(id(factor.tensor.op), {}).items():
            at = _reduce_step(factor.indices[axis], body.axis, stage)
            if fill == neutral and at is not None:
                found.setdefault(at[0], (length, at[1]))
    return found


def _reduce_step(index: Expr, axes: Sequence[IterVar], stage: Stage):
    """(reduce axis, step) when `index` is its variable, or its variable * step + a spatial axis narrower than step."""
    for r in axes:
        if _is_var(index, r.var):
            return r, 1
        if isinstance(index, BinOp) and index.op == "add":
            for scaled, lane in ((index.a, index.b), (index.b, index.a)):
                if isinstance(scaled, BinOp) and scaled.op == "mul" and _is_var(scaled.a, r.var) \
                        and isinstance(scaled.b, IntImm) and any(_is_var(lane, a.var) and a.extent <= scaled.b.value
                                                                 for a in stage.op.axis):
                    return r, scaled.b.value
    return None


def _uncast(expr: Expr) -> Expr:
    return _uncast(expr.value) if isinstance(expr, Cast) else expr


def loop_bounds(stage: Stage, leaves: Sequence[IterVar], values: dict, lengths: dict[int, Expr], outer: int,
                extents: dict[IterVar, int], summed: dict[IterVar, tuple] = {}, fixed: frozenset = frozenset()
                ) -> tuple[list[Expr], dict[IterVar, Expr]]:
    """Guards and symbolic extents that stop `stage`'s loops at the run-time `lengths` (axis -> int64 length,
    already a Load) among its first `outer` leaves (those outside any reduction), and its reduce loops at `summed`
    (reduce axis -> (length, step): summed_lengths'): (conditions, leaf -> extent). The `fixed` leaves keep their extents
    (a guard instead)."""
    fused = {rel.fused for rel in stage.relations if isinstance(rel, Fuse)}
    conds: list[Expr] = []
    bounded: dict[IterVar, Expr] = {}
    for axis, (length, lane) in summed.items():
        leaf, step = summed_leaf(stage, axis, lane, leaves)
        if leaf is not None:
            bound = cast(leaf.var.dtype, length)
            bounded[leaf] = minimum(IntImm(extents[leaf], leaf.var.dtype), (bound + (step - 1)) // step)
    for axis, length in sorted(lengths.items()):
        value = values[stage.op.axis[axis]]
        for d, iv in enumerate(leaves):
            kind = stage.annotations.get(iv, ForKind.SERIAL)
            if kind is ForKind.VECTORIZED:  # one that alone walks the whole axis (no vector width divides it) stops,
                # also inside a reduction (a micro-kernel's row of accumulators): codegen runs it in whole vectors
                if iv not in fused and iv not in fixed and iv not in bounded and iv not in stage.tensorized \
                        and _walks_axis(value, iv, leaves, extents, stage.op.axis[axis].extent):
                    bounded[iv] = minimum(IntImm(extents[iv], iv.var.dtype), cast(iv.var.dtype, length))
                continue
            if d >= outer or not _mentions(value, iv.var) or kind not in SKIPPABLE_KINDS \
                    or iv in stage.bindings or iv in stage.tensorized or (iv in bounded and iv not in fused):
                continue
            # the first point of the tile this leaf's iteration starts: deeper leaves at 0
            start = simplify(substitute(value, {leaf.var: IntImm(0, leaf.var.dtype) for leaf in leaves[d + 1:]}))
            bound = cast(iv.var.dtype, length)
            step = None if iv in fused or iv in fixed else _step(start, iv.var)
            # a fused loop whose outermost part is the axis (fused // c) ends at length * c: the iterations of a
            # parallel loop past it would otherwise be whole chunks of idle threads
            per = _read_scale(start, iv.var) if iv in fused and iv not in fixed and iv not in bounded else None
            if step is not None:
                bounded[iv] = minimum(IntImm(extents[iv], iv.var.dtype), (bound + (step - 1)) // step)
            elif per is not None:
                bounded[iv] = minimum(IntImm(extents[iv], iv.var.dtype), bound * per)
            else:
                conds.append(binop("lt", start, bound))
    return conds, bounded


def _walks_axis(value: Expr, iv: IterVar, leaves: Sequence[IterVar], extents: dict, extent: int) -> bool:
    """Whether the int64 leaf `iv` alone walks an axis of `extent` points (`value`: the axis as the leaves give it):
    its extent is the axis', and the axis moves by one per iteration of it."""
    if iv.var.dtype != "int64" or extents.get(iv) != extent or iv.kind == "reduce" or not _mentions(value, iv.var):
        return False
    others = {leaf.var: IntImm(0, leaf.var.dtype) for leaf in leaves if leaf is not iv}
    return _step(simplify(substitute(value, others)), iv.var) == 1


def summed_leaf(stage: Stage, axis: IterVar, lane: int, leaves: Sequence[IterVar]) -> tuple[Optional[IterVar], int]:
    """The leaf loop that stops a reduce `axis` summed at var * `lane` + a lane (the axis itself, or the outer leaf
    of its split) and its step along the axis, or (None, 0) when no such loop may stop early (vector, unrolled,
    tensorized)."""
    leaf, step = (axis, lane) if axis in leaves else next(
        ((rel.outer, rel.factor * lane) for rel in stage.relations if isinstance(rel, Split) and rel.parent is axis
         and rel.outer in leaves), (None, 0))
    if leaf is None or stage.annotations.get(leaf, ForKind.SERIAL) not in SKIPPABLE_KINDS or leaf in stage.tensorized:
        return None, 0
    return leaf, step


def summed_operands(sch: Schedule, fills: dict, skipped: dict, reads_of: Callable) -> dict[int, dict[int, Expr]]:
    """Per stage (the id of its op), axis -> length: the stages that only this kernel sees, read only by sums that
    stop at a length (summed_lengths') at that sum's own reduce variable, along one axis (a MatMul's packed values:
    its panels along K): their points past the last the sums read are never read, so they stop there too."""
    outputs = {id(t.op) for t in sch.outputs}
    stages = [s for s in sch.stages if not s.inlined and s.attach is None and isinstance(s.op, ComputeOp)]
    sums = {id(r.op): {axis: (n, summed_leaf(r, axis, lane, r.leaf_iter_vars)[1])
                       for axis, (n, lane) in summed_lengths(r, fills).items() if lane == 1}
            for r in stages}
    found: dict[int, dict[int, Expr]] = {}
    for p in stages:
        if id(p.op) in outputs or p.scope != "global" or id(p.op) in skipped:
            continue
        wanted = None
        for r in sch.stages:
            reads = reads_of(r.body, p.op) if r is not p and not r.inlined else []
            if not reads:
                continue
            ok = {(b, n, step) for axis, (n, step) in sums.get(id(r.op), {}).items() if step
                  for b in range(len(p.op.axis)) if all(_is_var(index[b], axis.var) for index in reads)}
            wanted = ok if wanted is None else {w for w in wanted if w in ok}
            if not wanted:
                break
        if wanted:
            b, n, step = min(wanted, key=lambda w: (w[0], w[2]))
            found[id(p.op)] = {b: n if step == 1 else (n + (step - 1)) // step * step}
    return found


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


__all__ = ["skippable_axes", "derived_fills", "clipped_stages", "summed_operands", "summed_leaf", "summed_lengths",
           "loop_bounds"]
