"""Lowering: a scheduled tensor expression becomes one PrimFunc (a loop program over flat buffers).

Per stage, the leaf axes become nested loops; the original axes are recovered from the split/fuse
relations; splits that do not divide get a guard; reductions get an init nest placed just outside
their first reduce loop; inlined stages are substituted into their consumers.
"""
from __future__ import annotations

from typing import Optional, Sequence

from ..errors import ScheduleError
from ..tir.expr import Buffer, Expr, IntImm, Load, Var, as_expr, binop, logical_and
from ..tir.functor import rewrite_expr, substitute
from ..tir.simplify import simplify, simplify_stmt
from ..tir.stmt import Allocate, For, ForKind, IfThenElse, PrimFunc, Stmt, Store, seq
from .schedule import Fuse, Schedule, Split, Stage, reads_at_own_axes
from .tensor import ComputeOp, IterVar, PlaceholderOp, Reduce, Tensor, TensorRead


def flat_index(shape: Sequence[int], indices: Sequence[Expr]) -> Expr:
    """Row-major flattening: ((i0 * d1 + i1) * d2 + i2) ..."""
    if not indices:
        return IntImm(0)
    index = indices[0]
    for dim, i in zip(shape[1:], indices[1:]):
        index = index * dim + i
    return index


class _Lowering:
    def __init__(self, sch: Schedule, args: Sequence[Tensor]):
        self.sch = sch
        self.buffers: dict[int, Buffer] = {}
        names: set[str] = set()
        for t in args:
            self._add_buffer(t, names)
        self.workspaces: list[Buffer] = []
        self.locals: list[Buffer] = []
        for stage in sch.stages:
            # A producer whose epilogue is attached and has its exact type accumulates right in the
            # epilogue's buffer: each tile is finished, then rewritten in place, before the next.
            producer = stage.attach[0] if stage.after_producer else None
            if producer is not None and id(stage.op) in self.buffers and id(producer.op) not in self.buffers \
                    and stage.op.shape == producer.op.shape and stage.op.dtype == producer.op.dtype:
                self.buffers[id(producer.op)] = self.buffers[id(stage.op)]
        for stage in sch.stages:
            if stage.inlined or id(stage.op) in self.buffers:
                continue
            buf = self._add_buffer(stage.tensor, names, scope=stage.scope)
            (self.locals if stage.scope == "local" else self.workspaces).append(buf)
        self._expanded: dict[int, Expr] = {}

    def _add_buffer(self, t: Tensor, names: set[str], scope: str = "global") -> Buffer:
        name, k = t.name, 1
        while name in names:
            name, k = f"{t.name}_{k}", k + 1
        names.add(name)
        buf = Buffer(name, t.shape, t.dtype, scope)
        self.buffers[id(t.op)] = buf
        return buf

    # -- expressions ---------------------------------------------------------------------------
    def expand(self, expr: Expr) -> Expr:
        """Replace reads of inlined stages by their bodies and other reads by flat buffer loads."""

        def visit(e: Expr) -> Optional[Expr]:
            if not isinstance(e, TensorRead):
                return None
            op = e.tensor.op
            if isinstance(op, ComputeOp) and self.sch[e.tensor].inlined:
                body = self._inlined_body(op)
                return substitute(body, {ax.var: idx for ax, idx in zip(op.axis, e.indices)})
            buf = self.buffers.get(id(op))
            if buf is None:
                kind = "placeholder" if isinstance(op, PlaceholderOp) else "tensor"
                raise ScheduleError(f"{kind} {op.name} is read but not passed as an argument to lower()")
            return buf.load(flat_index(buf.shape, e.indices))

        return rewrite_expr(expr, visit)

    def _inlined_body(self, op: ComputeOp) -> Expr:
        if id(op) not in self._expanded:
            self._expanded[id(op)] = self.expand(op.body)
        return self._expanded[id(op)]

    # -- loop nests ----------------------------------------------------------------------------
    def stage_nest(self, stage: Stage) -> Stmt:
        op = stage.op
        buf = self.buffers[id(op)]
        leaves = stage.leaf_iter_vars
        values: dict[IterVar, Expr] = {iv: iv.var for iv in leaves}
        guards: list[Expr] = []
        for rel in reversed(stage.relations):
            if isinstance(rel, Split):
                values[rel.parent] = values[rel.outer] * rel.factor + values[rel.inner]
                if rel.parent.extent % rel.factor:
                    guards.append(binop("lt", values[rel.parent], rel.parent.extent))
            elif isinstance(rel, Fuse):
                values[rel.outer] = values[rel.fused] // rel.inner.extent
                values[rel.inner] = values[rel.fused] % rel.inner.extent
        root = {iv.var: values[iv] for iv in list(op.axis) + list(op.reduce_axis)}
        out_index = flat_index(buf.shape, [values[a] for a in op.axis])
        body = self.expand(op.body)

        def guarded(stmt: Stmt, conds: list[Expr]) -> Stmt:
            if not conds:
                return stmt
            cond = conds[0]
            for c in conds[1:]:
                cond = logical_and(cond, c)
            return IfThenElse(cond, stmt)

        def nest(ivs: Sequence[IterVar], stmt: Stmt, conds: Sequence[Expr] = ()) -> Stmt:
            # Each guard sits just inside the innermost loop it mentions, so a guard that only the
            # outer loops decide (a block split that does not divide) stays out of the micro-kernel,
            # where a conditional store would keep the accumulators in memory.
            depth = {id(c): max((d for d, iv in enumerate(ivs) if _mentions(c, iv.var)), default=-1) for c in conds}
            for d in reversed(range(len(ivs))):
                stmt = guarded(stmt, [c for c in conds if depth[id(c)] == d])
                iv = ivs[d]
                stmt = For(iv.var, IntImm(iv.extent), stage.annotations.get(iv, ForKind.SERIAL), stmt)
            return guarded(stmt, [c for c in conds if depth[id(c)] == -1])

        epilogues = [s for s in self.sch.stages if s.attach is not None and s.attach[0] is stage]
        if not isinstance(body, Reduce):
            if epilogues:
                raise ScheduleError(f"reverse_compute_at: {op.name} is not a reduction")
            return nest(leaves, Store(buf, out_index, substitute(body, root)), guards)

        update = Store(buf, out_index, substitute(body.combine(buf.load(out_index), body.source), root))
        first_reduce = next(k for k, iv in enumerate(leaves) if self._is_reduce(stage, iv))
        inner = leaves[first_reduce:]
        inner_spatial = [iv for iv in inner if not self._is_reduce(stage, iv)]
        # The init covers exactly the spatial leaves that sit inside the first reduce loop, so guard
        # it only with conditions that do not mention reduce axes.
        init_guards = [g for g in guards if not self._mentions_reduce(stage, g)]
        init = Store(buf, out_index, body.init)
        init_nest = nest([iv for iv in inner_spatial], init, init_guards)
        # Vectorizing the init over a spatial axis is always safe; keep other annotations serial.
        main = seq(init_nest, nest(inner, update, guards))
        if not epilogues:
            return nest(leaves[:first_reduce], main)
        if len(epilogues) > 1 or epilogues[0].attach[1] not in leaves[:first_reduce]:
            raise ScheduleError(f"reverse_compute_at: one consumer per reduction, attached outside its reduce loops")
        at = leaves.index(epilogues[0].attach[1]) + 1
        epilogue = self.epilogue_nest(stage, epilogues[0], leaves[at:], values, init_guards, nest)
        return nest(leaves[:at], seq(nest(leaves[at:first_reduce], main), epilogue))

    def epilogue_nest(self, producer: Stage, consumer: Stage, inner: Sequence[IterVar], values: dict,
                      guards: list[Expr], nest) -> Stmt:
        """The consumer over the producer's region of one iteration of the attach loop: the spatial
        leaves inside it, vectorized like the producer; a cropping consumer is guarded, except
        on a leaf that alone spans a whole axis, whose extent is clamped instead."""
        pop, cop = producer.op, consumer.op
        spatial = [iv for iv in inner if iv.kind != "reduce"]
        clamped: dict[IterVar, int] = {}
        crop: list[Expr] = []
        cbuf = self.buffers[id(cop)]
        if consumer.point_map is not None:
            return self._mapped_epilogue(producer, consumer, spatial, values, guards)
        if not reads_at_own_axes(self.sch, cop, pop) or len(cop.axis) != len(pop.axis) or any(
                c.extent > p.extent for c, p in zip(cop.axis, pop.axis)):
            raise ScheduleError(f"reverse_compute_at: {cop.name} does not read {pop.name} elementwise")
        for c, p in zip(cop.axis, pop.axis):
            if c.extent == p.extent:
                continue
            leaf = p if p in spatial else next((r.inner for r in producer.relations if isinstance(r, Split)
                                                 and r.parent is p and r.outer.extent == 1), None)
            if leaf is not None and leaf in spatial and leaf.extent == p.extent:
                clamped[leaf] = c.extent
            else:
                crop.append(binop("lt", values[p], c.extent))
        point = {c.var: values[p] for c, p in zip(cop.axis, pop.axis)}
        store = Store(cbuf, flat_index(cbuf.shape, [values[p] for p in pop.axis]),
                      substitute(self.expand(cop.body), point))
        return self._epilogue_loops(producer, spatial, store, guards + crop, clamped)

    def _mapped_epilogue(self, producer: Stage, consumer: Stage, spatial: list[IterVar], values: dict,
                         guards: list[Expr]) -> Stmt:
        """The epilogue of a producer computed in another layout (a conv over the flattened image):
        each producer point is stored at the consumer point the map gives, where there is one; every
        read of the producer must land on the point just computed (checked after simplification)."""
        pop, cop = producer.op, consumer.op
        if not reads_at_own_axes(self.sch, cop, pop, anywhere=True):
            raise ScheduleError(f"reverse_compute_at: {cop.name} reads a stage computed after {pop.name}")
        point, valid = consumer.point_map([values[p] for p in pop.axis])
        cbuf, pbuf = self.buffers[id(cop)], self.buffers[id(pop)]
        body = simplify(substitute(self.expand(cop.body), {c.var: e for c, e in zip(cop.axis, point)}))
        here = flat_index(pbuf.shape, [values[p] for p in pop.axis])
        from ..tir.functor import walk_expr

        extents = {iv.var: iv.extent for iv in producer.leaf_iter_vars}
        for e in walk_expr(body):
            if isinstance(e, Load) and e.buffer is pbuf and not _agree(e.index, here, extents, valid):
                raise ScheduleError(f"reverse_compute_at: {cop.name} reads {pop.name} away from the mapped point")
        store = Store(cbuf, simplify(flat_index(cbuf.shape, list(point))), body)
        return self._epilogue_loops(producer, spatial, store, guards + ([valid] if valid is not None else []), {})

    def _epilogue_loops(self, producer: Stage, spatial: list[IterVar], store: Stmt, conds: list[Expr],
                        clamped: dict) -> Stmt:

        def loop(iv: IterVar, body: Stmt) -> Stmt:
            # Vector lanes as in the producer; unrolled copies of the tile loops measured 3-4x slower
            # convs (LLVM stopped keeping the accumulators in registers), so LLVM unrolls on its own.
            kind = ForKind.VECTORIZED if producer.annotations.get(iv) == ForKind.VECTORIZED else ForKind.SERIAL
            return For(iv.var, IntImm(clamped.get(iv, iv.extent)), kind, body)

        last = spatial[-1] if spatial else None
        lane = [c for c in conds if last is not None and producer.annotations.get(last) == ForKind.VECTORIZED
                and _mentions(c, last.var)]
        rest = [c for c in conds if not any(c is x for x in lane)]
        if lane:
            # A lane-dependent guard makes the vector loop scalar: only the tiles that cross the
            # crop take the guarded copy, the others store whole vectors.
            whole = _all([substitute(c, {last.var: IntImm(clamped.get(last, last.extent) - 1)}) for c in lane])
            stmt: Stmt = IfThenElse(whole, loop(last, store), loop(last, IfThenElse(_all(lane), store)))
            spatial = spatial[:-1]
        else:
            stmt = store
        if rest:
            stmt = IfThenElse(_all(rest), stmt)
        for iv in reversed(spatial):
            stmt = loop(iv, stmt)
        return stmt

    @staticmethod
    def _is_reduce(stage: Stage, iv: IterVar) -> bool:
        return iv.kind == "reduce"

    @staticmethod
    def _mentions_reduce(stage: Stage, expr: Expr) -> bool:
        from ..tir.functor import walk_expr

        reduce_vars = {iv.var for iv in stage.leaf_iter_vars if iv.kind == "reduce"}
        return any(isinstance(e, Var) and e in reduce_vars for e in walk_expr(expr))


def _agree(a: Expr, b: Expr, extents: dict, valid: Expr | None = None, samples: int = 48) -> bool:
    """Whether two index expressions over loop variables agree on the loop corners and on seeded
    random points (each variable within its extent) where `valid` holds (points the guard skips
    are never stored, e.g. the padding columns of a conv over the flattened image): a check of a
    schedule's promise, not a proof."""
    import random

    from ..tir.functor import walk_expr

    exprs = [a, b] + ([valid] if valid is not None else [])
    names = list(dict.fromkeys(e for x in exprs for e in walk_expr(x) if isinstance(e, Var)))
    rng = random.Random(0)
    points = [{v: 0 for v in names}, {v: extents.get(v, 1) - 1 for v in names}]
    points += [{v: rng.randrange(extents.get(v, 1)) for v in names} for _ in range(samples)]
    for point in points:
        at = {v: IntImm(x, v.dtype) for v, x in point.items()}
        if valid is not None and not _holds(simplify(substitute(valid, at))):
            continue
        va, vb = simplify(substitute(a, at)), simplify(substitute(b, at))
        if not (isinstance(va, IntImm) and isinstance(vb, IntImm) and va.value == vb.value):
            return False
    return True


def _holds(condition: Expr) -> bool:
    # A condition over constants simplifies to an integer (bool) immediate; anything else is not known to hold.
    return isinstance(condition, IntImm) and bool(condition.value)


def _mentions(expr: Expr, var: Var) -> bool:
    from ..tir.functor import walk_expr

    return any(e is var for e in walk_expr(expr))


def _all(conds: Sequence[Expr]) -> Expr:
    cond = conds[0]
    for c in conds[1:]:
        cond = logical_and(cond, c)
    return cond


def lower(sch: Schedule, args: Sequence[Tensor], name: str, num_outputs: int = 1) -> PrimFunc:
    """Lower `sch` to a PrimFunc taking `args` (inputs then the last `num_outputs` outputs).

    Intermediate stages that are neither inlined nor local become workspace parameters appended
    after the outputs; the caller (the graph executor) provides their memory."""
    for stage in sch.stages:
        if stage.attach is not None and not stage.after_producer:
            raise ScheduleError(f"compute_at of {stage.op.name} is not supported by this lowering yet")
    low = _Lowering(sch, args)
    body_parts = [low.stage_nest(s) for s in sch.stages if not s.inlined and s.attach is None]
    body = seq(*body_parts)
    for buf in low.locals:
        body = Allocate(buf, body)
    params = tuple(low.buffers[id(t.op)] for t in args) + tuple(low.workspaces)
    func = PrimFunc(name, params, simplify_stmt(body), len(args) - num_outputs, num_outputs)
    return func


__all__ = ["lower", "flat_index", "simplify", "as_expr"]
