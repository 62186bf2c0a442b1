"""Lowering: a scheduled tensor expression becomes one PrimFunc (a loop program over flat buffers).

Per stage, the leaf axes become nested loops; the original axes are recovered from the split/fuse
relations; splits that do not divide get a guard; reductions get an init nest placed just outside
their first reduce loop; inlined stages are substituted into their consumers; a compute_at stage is
lowered inside its consumer's loop over the region bound.py infers, into a local buffer.
"""
from __future__ import annotations

from typing import Optional, Sequence

from ..errors import ScheduleError
from ..tir.expr import Buffer, Expr, IntImm, Load, Var, as_expr, binop, cast, logical_and, select
from ..tir.functor import rewrite_expr, rewrite_stmt, substitute, walk_stmt
from ..tir.index_guard import with_index_fault
from ..tir.simplify import KEEP_UNIT_LOOP, simplify, simplify_stmt
from ..tir.stmt import Allocate, Barrier, For, ForKind, IfThenElse, PrimFunc, Stmt, Store, seq
from .bound import infer_region
from .run_time_bounds import (clipped_stages, derived_fills, loop_bounds, skippable_axes, summed_lengths,
                              summed_operands)
from .run_time_layouts import LayoutAddressing, RunTimeLayoutError
from .schedule import Fuse, Schedule, Split, Stage, reads_at_own_axes
from .tensor import ComputeOp, ExternOp, IterVar, PlaceholderOp, Reduce, Tensor, TensorRead
from .tensorize import TensorizeError, tensorize_nest


def flat_index(shape: Sequence[int], indices: Sequence[Expr]) -> Expr:
    """Row-major flattening: ((i0 * d1 + i1) * d2 + i2) ..."""
    if not indices:
        return IntImm(0)
    index = indices[0]
    for dim, i in zip(shape[1:], indices[1:]):
        index = index * dim + i
    return index


class _Lowering(LayoutAddressing):
    def __init__(self, sch: Schedule, args: Sequence[Tensor]):
        self.sch = sch
        self.buffers: dict[int, Buffer] = {}
        names: set[str] = set()
        for t in args:
            self._add_buffer(t, names)
        self.workspaces: list[Buffer] = []
        self.locals: list[Buffer] = []
        self.names = names
        self.strides: dict[Buffer, list[int]] = {}  # storage_align'd buffers: element stride per axis
        self.init_layouts(sch, args)  # arguments laid out at run-time lengths (core/te/run_time_layouts.py)
        self.attached: dict[int, tuple[Buffer, list[Expr]]] = {}  # compute_at op -> (local buffer, first point)
        self.threads: dict[Var, int] = {}  # threadIdx-bound loops around the nest being lowered -> extent
        for stage in sch.stages:
            if stage.aligns and id(stage.op) in self.buffers:
                raise ScheduleError(f"storage_align: {stage.op.name} is an argument of the kernel, whose layout "
                                    f"the caller fixes")
        for stage in sch.stages:
            # A producer whose epilogue is attached and has its exact type accumulates right in the
            # epilogue's buffer: each tile is finished, then rewritten in place, before the next.
            producer = stage.attach[0] if stage.after_producer else None
            if producer is not None and id(stage.op) in self.buffers and id(producer.op) not in self.buffers \
                    and stage.op.shape == producer.op.shape and stage.op.dtype == producer.op.dtype:
                self.buffers[id(producer.op)] = self.buffers[id(stage.op)]
        for stage in sch.stages:
            if stage.inlined or id(stage.op) in self.buffers or _computed_at(stage):
                continue
            buf = self._add_buffer(stage.tensor, names, scope=stage.scope, aligns=stage.aligns)
            (self.locals if stage.scope in ("local", "shared") else self.workspaces).append(buf)
        self._expanded: dict[int, Expr] = {}
        # stages that stop at run-time lengths (op id -> axis -> length): core/te/run_time_bounds.py
        self.skipped = skippable_axes(sch, self.reads_of) if any(s.run_time_bounds for s in sch.stages) else {}
        # what holds a number past a length (inputs: Schedule.run_time_fills; stages computed from them), which
        # sums and maxima over it may stop at
        self.fills = derived_fills(sch, sch.run_time_fills, self.skipped) if sch.run_time_fills else {}
        # of those, the stages that stop at the length and are read through a select of that number past it
        self.clipped = clipped_stages(sch, self.fills)
        for op_id, axes in self.clipped.items():
            self.skipped[op_id] = {**{a: n for a, (n, _) in axes.items()}, **self.skipped.get(op_id, {})}
        # and the stages only sums that stop at a length read, at their reduce variable (a MatMul's packed values)
        self.skipped.update(summed_operands(sch, self.fills, self.skipped, self.reads_of) if self.fills else {})

    def _add_buffer(self, t: Tensor, names: set[str], scope: str = "global", aligns: Optional[dict] = None,
                    shape: Optional[Sequence[int]] = None) -> Buffer:
        name, k = t.name, 1
        while name in names:
            name, k = f"{t.name}_{k}", k + 1
        names.add(name)
        shape = tuple(t.shape if shape is None else shape)
        strides = _aligned_strides(shape, aligns) if aligns else None
        # A padded buffer is (rows of axis 0, padded row) in memory; self.strides addresses it.
        buf = Buffer(name, (shape[0], strides[0]) if strides else shape, t.dtype, scope)
        if strides:
            self.strides[buf] = strides
        self.buffers[id(t.op)] = buf
        return buf

    def address(self, buf: Buffer, indices: Sequence[Expr]) -> Expr:
        """The flat element index of a logical point of `buf` (row-major, or its padded strides, or row-major at its
        run-time lengths)."""
        layout = self.layout(buf)
        if layout:
            return flat_index([cast(i.dtype, layout[d]) if d in layout else n
                               for d, (n, i) in enumerate(zip(buf.shape, map(as_expr, indices)))], indices)
        strides = self.strides.get(buf)
        if strides is None:
            return flat_index(buf.shape, indices)
        index: Expr = IntImm(0)
        for i, stride in zip(indices, strides):
            index = index + i * stride
        return index

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
            if id(op) in self.attached:  # a compute_at producer: its local buffer holds the region only
                local, first = self.attached[id(op)]
                return local.load(self.address(local, [i - b for i, b in zip(e.indices, first)]))
            buf = self.buffers.get(id(op))
            if buf is None:
                kind = "placeholder" if isinstance(op, PlaceholderOp) else "tensor"
                raise ScheduleError(f"{kind} {op.name} is read but not passed as an argument to lower()")
            load = self.layout_load(buf, e.indices) if buf in self.layouts else buf.load(self.address(buf, e.indices))
            for axis, (length, fill) in self.clipped.get(id(op), {}).items():  # not computed past the length
                index = e.indices[axis]
                load = select(binop("lt", index, cast(index.dtype, self.expand(length))), load, fill)
            return load

        return rewrite_expr(expr, visit)

    def _inlined_body(self, op: ComputeOp) -> Expr:
        if id(op) not in self._expanded:
            self._expanded[id(op)] = self.expand(self.sch[Tensor(op)].body)
        return self._expanded[id(op)]

    def reads_of(self, expr: Expr, producer: ComputeOp) -> list[tuple[Expr, ...]]:
        """The index tuples at which `expr` reads `producer`, directly or through inlined stages."""
        from ..tir.functor import walk_expr

        found: list[tuple[Expr, ...]] = []
        for e in walk_expr(expr):
            if not isinstance(e, TensorRead):
                continue
            if e.tensor.op is producer:
                found.append(e.indices)
            elif isinstance(e.tensor.op, ComputeOp) and self.sch[e.tensor].inlined:
                stage = self.sch[e.tensor]
                body = substitute(stage.body, {ax.var: i for ax, i in zip(stage.op.axis, e.indices)})
                found += self.reads_of(body, producer)
        return found

    def check_single_readers(self) -> None:
        """A compute_at producer exists only per tile of its consumer: no other stage may read it."""
        for producer in self.sch.stages:
            if not _computed_at(producer):
                continue
            for other in self.sch.stages:
                if other is producer or other is producer.attach[0] or other.inlined:
                    continue
                if self.reads_of(other.body, producer.op):
                    raise ScheduleError(f"compute_at: {producer.op.name} is also read by {other.op.name}, "
                                        f"not only by {producer.attach[0].op.name}")

    def attach_producers(self, stage: Stage, ext: dict, root: dict) -> dict[IterVar, list[tuple[Buffer, Stmt]]]:
        """Lower every stage compute_at'd into `stage`: per attach loop, (local buffer, the producer's
        nest over the region one iteration of that loop reads). Registers each local buffer, so the
        consumer's reads, expanded after this, load from it."""
        placed: dict[IterVar, list[tuple[Buffer, Stmt]]] = {}
        leaves = stage.leaf_iter_vars
        for producer in self.sch.stages:
            if not _computed_at(producer) or producer.attach[0] is not stage:
                continue
            iv = producer.attach[1]
            pos = next((k for k, leaf in enumerate(leaves) if leaf is iv), None)
            if pos is None:
                raise ScheduleError(f"compute_at: {iv.name} is no longer a loop of {stage.op.name} "
                                    f"(split or fused after {producer.op.name} was attached)")
            if any(stage.annotations.get(x) is ForKind.VECTORIZED for x in leaves[: pos + 1]):
                raise ScheduleError(f"compute_at: {producer.op.name} would sit inside a vectorized loop of "
                                    f"{stage.op.name}")
            reads = [tuple(simplify(substitute(i, root)) for i in idx)
                     for idx in self.reads_of(stage.body, producer.op)]
            if not reads:
                raise ScheduleError(f"compute_at: {stage.op.name} does not read {producer.op.name}")
            threads = {**self.threads, **{x.var: ext[x] for x in leaves[: pos + 1]
                                          if stage.bindings.get(x, "").startswith("threadIdx")}}
            relaxed = {x.var: ext[x] for x in leaves[pos + 1:]}
            if producer.scope == "shared":  # one copy for the whole block: what all its threads read
                relaxed.update(threads)
            region = infer_region(reads, relaxed, producer.op.shape)
            scope = "shared" if producer.scope == "shared" else "local"  # a block's copy, or the thread's own
            local = self._add_buffer(producer.tensor, self.names, scope, producer.aligns, [e for _, e in region])
            del self.buffers[id(producer.op)]  # read through self.attached, relative to the region
            self.attached[id(producer.op)] = (local, [first for first, _ in region])
            self._expanded.clear()  # inlined bodies expanded before now read the producer's old buffer
            outer_threads, self.threads = self.threads, threads
            try:
                placed.setdefault(iv, []).append((local, self.stage_nest(producer, region, local)))
            finally:
                self.threads = outer_threads
        return placed

    # -- loop nests ----------------------------------------------------------------------------
    def stage_nest(self, stage: Stage, region: Optional[list] = None, buf: Optional[Buffer] = None,
                   edge: Optional[bool] = None) -> Stmt:
        """The loop nest of one stage. With `region` (a compute_at stage: per axis its first point,
        over the consumer's outer loops, and its extent), only that region, into local `buf` at
        coordinates relative to the first point. A region that may cross the tensor's edge gets two
        nests: the unguarded one for the tiles inside (`edge` False: vector loops stay vector
        loops), the guarded one for the tiles at the edge (`edge` True)."""
        op = stage.op
        if region is not None and edge is None:
            edges = [(first, extent, dim) for (first, extent), dim in zip(region, op.shape) if extent < dim]
            if edges and self._fills_shared(stage):
                # Inside a thread loop the condition depends on the thread, and both nests would hold
                # the block's barriers around the shared fill: keep the one guarded nest instead.
                edge = True
            elif edges:
                inside = _all([c for first, extent, dim in edges
                               for c in (binop("ge", first, 0), binop("lt", first + (extent - 1), dim))])
                return IfThenElse(inside, self.stage_nest(stage, region, buf, edge=False),
                                  self.stage_nest(stage, region, buf, edge=True))
        buf = buf if buf is not None else self.buffers[id(op)]
        if isinstance(op, ExternOp):  # a hand-written loop program over its input buffers
            self.refuse_layout([buf, *(self.buffers[id(t.op)] for t in op.inputs)], "a hand-written nest uses it")
            return op.build([self.buffers[id(t.op)] for t in op.inputs], buf)
        if stage.tensorized:
            self.refuse_layout([buf, *(b for b, laid in self.laid_out.items() if self.reads_of(stage.body, laid))],
                               "a tensorized nest addresses it")
        if region is not None:
            self.refuse_layout([buf], "it is computed per tile of a consumer")
        leaves = stage.leaf_iter_vars
        ext = _leaf_extents(stage, region)
        values: dict[IterVar, Expr] = {iv: iv.var for iv in leaves}
        guards: list[Expr] = []
        for rel in reversed(stage.relations):
            if isinstance(rel, Split):
                values[rel.parent] = values[rel.outer] * rel.factor + values[rel.inner]
                if ext[rel.parent] % rel.factor and ext[rel.parent] > rel.factor:
                    guards.append(binop("lt", values[rel.parent], ext[rel.parent]))
            elif isinstance(rel, Fuse):
                values[rel.outer] = values[rel.fused] // ext[rel.inner]
                values[rel.inner] = values[rel.fused] % ext[rel.inner]
        root = {iv.var: values[iv] for iv in list(op.axis) + list(stage.reduce_axis)}
        if region is not None:
            for iv, (first, extent), dim in zip(op.axis, region, op.shape):
                root[iv.var] = first + values[iv]
                if extent < dim and edge:  # a tile at the edge may reach past the tensor: compute only real points
                    guards += [binop("ge", root[iv.var], 0), binop("lt", root[iv.var], dim)]
        out_index = self.address(buf, [values[a] for a in op.axis])
        attached = self.attach_producers(stage, ext, root)
        # Reads are substituted to leaf loop variables before expansion: a compute_at producer's first
        # point is over leaf variables too (and a leaf may be a root axis' own variable).
        body = self.expand(substitute(stage.body, root))
        placed: list[IterVar] = []

        def guarded(stmt: Stmt, conds: list[Expr]) -> Stmt:
            if not conds:
                return stmt
            cond = conds[0]
            for c in conds[1:]:
                cond = logical_and(cond, c)
            return IfThenElse(cond, stmt)

        def nest(ivs: Sequence[IterVar], stmt: Stmt, conds: Sequence[Expr] = (), init: bool = False) -> Stmt:
            # Each guard sits just inside the innermost loop it mentions, so a guard that only the
            # outer loops decide (a block split that does not divide) stays out of the micro-kernel,
            # where a conditional store would keep the accumulators in memory.
            depth = {id(c): max((d for d, iv in enumerate(ivs) if _mentions(c, iv.var)), default=-1) for c in conds}
            for d in reversed(range(len(ivs))):
                stmt = guarded(stmt, [c for c in conds if depth[id(c)] == d])
                iv = ivs[d]
                if not init:  # compute_at producers run first in each iteration of their loop
                    for local, producer_nest in attached.get(iv, ()):
                        if local.scope == "shared":  # a block fills it cooperatively: wait for all
                            # writers before reading, and for the last iteration's readers before writing
                            producer_nest = seq(Barrier(), producer_nest, Barrier())
                        stmt = Allocate(local, seq(producer_nest, stmt))
                        placed.append(iv)
                pragmas = tuple(sorted(stage.pragmas.get(iv, {}).items()))
                if iv in stage.bindings:
                    pragmas += (("thread_tag", stage.bindings[iv]),)
                stmt = For(iv.var, run_time_extents.get(iv, IntImm(ext[iv])), stage.annotations.get(iv, ForKind.SERIAL),
                           stmt, pragmas)
                if iv in stage.tensorized and not init:
                    stmt = _tensorize_or_defer(stmt, [v.kind for v in ivs[d:]], stage.tensorized[iv])
            return guarded(stmt, [c for c in conds if depth[id(c)] == -1])

        def finished(stmt: Stmt) -> Stmt:
            if len(placed) != sum(len(v) for v in attached.values()):
                raise ScheduleError(f"compute_at: an attach loop of {op.name} is not in its loop nest")
            return stmt

        epilogues = [s for s in self.sch.stages if s.attach is not None and s.attach[0] is stage and s.after_producer]
        skips, main_skips, run_time_extents = self._run_time_loops(stage, leaves, values, ext, region, epilogues)
        if epilogues and region is not None:
            raise ScheduleError(f"reverse_compute_at: {op.name} is itself computed at another stage")
        if not isinstance(body, Reduce):
            if epilogues:
                raise ScheduleError(f"reverse_compute_at: {op.name} is not a reduction")
            inside = self.layout_guards(buf, [values[a] for a in op.axis])  # the caller's array ends at the lengths
            if any(_mentions(c, iv.var) for c in inside for iv in leaves
                   if stage.annotations.get(iv) == ForKind.VECTORIZED):
                self.refuse_layout([buf], "its laid-out axis is a vector loop's")
            return finished(nest(leaves, Store(buf, out_index, body), guards + skips + main_skips + inside))

        self.refuse_layout([buf], "a reduction accumulates in it")
        update = Store(buf, out_index, body.combine(buf.load(out_index), body.source))
        first_reduce = next(k for k, iv in enumerate(leaves) if self._is_reduce(stage, iv))
        inner = leaves[first_reduce:]
        inner_spatial = [iv for iv in inner if not self._is_reduce(stage, iv)]
        # The init covers exactly the spatial leaves that sit inside the first reduce loop, so guard
        # it only with conditions that do not mention reduce axes.
        init_guards = [g for g in guards if not self._mentions_reduce(stage, g)]
        init = Store(buf, out_index, body.init)
        init_nest = nest([iv for iv in inner_spatial], init, init_guards, init=True)
        # Vectorizing the init over a spatial axis is always safe; keep other annotations serial.
        main = seq(init_nest, nest(inner, update, guards))
        if not epilogues:
            return finished(nest(leaves[:first_reduce], main, skips + main_skips))
        if len(epilogues) > 1 or epilogues[0].attach[1] not in leaves[:first_reduce]:
            raise ScheduleError("reverse_compute_at: one consumer per reduction, attached outside its reduce loops")
        at = leaves.index(epilogues[0].attach[1]) + 1
        epilogue = self.epilogue_nest(stage, epilogues[0], leaves[at:], values, init_guards, nest)
        inside = [c for c in skips if any(_mentions(c, iv.var) for iv in leaves[at:first_reduce])]
        return finished(nest(leaves[:at], seq(nest(leaves[at:first_reduce], main, inside + main_skips), epilogue),
                             [c for c in skips if not any(c is x for x in inside)]))

    def _run_time_loops(self, stage: Stage, leaves: Sequence[IterVar], values: dict, ext: dict, region,
                        epilogues: Sequence[Stage]) -> tuple[list[Expr], list[Expr], dict]:
        """Where `stage`'s loops stop at run-time lengths (core/te/run_time_bounds.py): guards for the whole nest,
        guards for its main part only (an axis its epilogue still runs over in full: the epilogue writes a mask's
        fill there), and leaf -> symbolic extent."""
        skipped = self.skipped.get(id(stage.op), {})
        summed = summed_lengths(stage, self.fills) if region is None else {}
        if region is not None or not (skipped or summed):
            return [], [], {}
        reduced = [k for k, iv in enumerate(leaves) if self._is_reduce(stage, iv)]
        outer = reduced[0] if reduced else len(leaves)
        after = self.skipped.get(id(epilogues[0].op), {}) if epilogues else skipped
        shared = {a: self.expand(n) for a, n in skipped.items() if after.get(a) is n}
        own = {a: self.expand(n) for a, n in skipped.items() if after.get(a) is not n}
        conds, extents = loop_bounds(stage, leaves, values, shared, outer, ext,
                                     {r: (self.expand(n), step) for r, (n, step) in summed.items()})
        at = leaves.index(epilogues[0].attach[1]) + 1 if epilogues else 0
        main, more = loop_bounds(stage, leaves, values, own, outer, ext, fixed=set(leaves[:at]) | set(extents))
        return conds, main, {**extents, **more}

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
        self.refuse_layout([cbuf], "an epilogue writes it")
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
        store = Store(cbuf, self.address(cbuf, [values[p] for p in pop.axis]),
                      substitute(self.expand(consumer.body), point))
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
        body = simplify(substitute(self.expand(consumer.body), {c.var: e for c, e in zip(cop.axis, point)}))
        here = self.address(pbuf, [values[p] for p in pop.axis])
        from ..tir.functor import walk_expr

        extents = {iv.var: iv.extent for iv in producer.leaf_iter_vars}
        for e in walk_expr(body):
            if isinstance(e, Load) and e.buffer is pbuf and not _agree(e.index, here, extents, valid):
                raise ScheduleError(f"reverse_compute_at: {cop.name} reads {pop.name} away from the mapped point")
        store = Store(cbuf, simplify(self.address(cbuf, list(point))), body)
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

    def _fills_shared(self, stage: Stage) -> bool:
        """Whether a shared copy is compute_at'd into `stage` (its nest holds barriers)."""
        return any(_computed_at(s) and s.attach[0] is stage and s.scope == "shared" for s in self.sch.stages)

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


def _computed_at(stage: Stage) -> bool:
    """Whether `stage` is compute_at'd inside a consumer (not a reverse_compute_at epilogue)."""
    return stage.attach is not None and not stage.after_producer and not stage.inlined


def _leaf_extents(stage: Stage, region: Optional[list]) -> dict[IterVar, int]:
    """Every iteration variable's extent, the relations replayed from the root extents (a compute_at
    stage's region, else the op's): a split's inner loop never exceeds its parent."""
    ext: dict[IterVar, int] = {iv: iv.extent for iv in stage.reduce_axis}
    for k, iv in enumerate(stage.op.axis):
        ext[iv] = iv.extent if region is None else region[k][1]
    for rel in stage.relations:
        if isinstance(rel, Split):
            ext[rel.outer] = -(-ext[rel.parent] // rel.factor)
            ext[rel.inner] = min(rel.factor, ext[rel.parent])
        elif isinstance(rel, Fuse):
            ext[rel.fused] = ext[rel.outer] * ext[rel.inner]
    return ext


def _aligned_strides(shape: Sequence[int], aligns: dict) -> list[int]:
    """Row-major strides in elements, each aligned axis' stride rounded up to factor * k + offset."""
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        stride = strides[d + 1] * shape[d + 1]
        if d in aligns:
            factor, offset = aligns[d]
            stride += (offset - stride) % factor
        strides[d] = stride
    return strides


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
    after the outputs; the caller (the graph executor) provides their memory. A compute_at stage
    becomes a local buffer of its region inside its consumer's attach loop."""
    arg_ops = {id(t.op) for t in args}
    for stage in sch.stages:
        if not _computed_at(stage):
            continue
        if id(stage.op) in arg_ops:
            raise ScheduleError(f"compute_at: {stage.op.name} is an argument of the kernel; only an "
                                f"intermediate can be computed per tile into a local buffer")
        parent = stage.attach[0]
        if parent.inlined or parent.after_producer:
            raise ScheduleError(f"compute_at: {parent.op.name}, where {stage.op.name} is computed, is "
                                f"{'inlined' if parent.inlined else 'a reverse_compute_at epilogue'} "
                                f"and has no loops of its own")
    low = _Lowering(sch, args)
    low.check_single_readers()
    body_parts = [low.stage_nest(s) for s in sch.stages if not s.inlined and s.attach is None]
    body = seq(*body_parts)
    for buf in low.locals:
        body = Allocate(buf, body)
    params = tuple(low.buffers[id(t.op)] for t in args) + tuple(low.workspaces)
    body, params = with_index_fault(_tensorize_deferred(simplify_stmt(body)), params)
    func = PrimFunc(name, params, body, len(args) - num_outputs, num_outputs)
    return func


_DEFERRED = "tensorize_after_simplify"


def _tensorize_or_defer(loop: For, kinds: list[str], intrinsic) -> Stmt:
    """The nest as one intrinsic call; a nest that holds a guard is marked instead and tensorized once the
    loop ranges have simplified its guards away (a region's edge guards, true wherever tiles divide)."""
    try:
        return tensorize_nest(loop, kinds, intrinsic)
    except TensorizeError:
        if not any(isinstance(s, IfThenElse) for s in walk_stmt(loop)):
            raise
        return _marked(loop, (intrinsic, tuple(kinds)))


def _marked(loop: Stmt, mark) -> Stmt:
    """The nest's loops annotated (KEEP_UNIT_LOOP: the simplifier keeps its unit loops, which the intrinsic's
    declaration counts), the outermost with `mark`."""
    if not isinstance(loop, For):
        return loop
    extra = ((KEEP_UNIT_LOOP, True),) + (((_DEFERRED, mark),) if mark is not None else ())
    return For(loop.var, loop.extent, loop.kind, _marked(loop.body, None), loop.annotations + extra)


def _tensorize_deferred(body: Stmt) -> Stmt:
    """Each marked nest (now simplified) as its intrinsic call."""
    def visit(s: Stmt) -> Optional[Stmt]:
        marks = dict(s.annotations).get(_DEFERRED) if isinstance(s, For) else None
        if marks is None:
            return None
        intrinsic, kinds = marks
        plain = For(s.var, s.extent, s.kind, s.body, tuple(a for a in s.annotations if a[0] != _DEFERRED))
        return tensorize_nest(plain, list(kinds), intrinsic)  # (the call replaces the annotated loops)

    return rewrite_stmt(body, lambda e: None, visit)


__all__ = ["lower", "flat_index", "simplify", "as_expr", "RunTimeLayoutError"]
