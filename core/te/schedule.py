"""Schedules: how a tensor expression is computed (loop structure), kept apart from the compute.

Each compute op gets a Stage whose leaf iteration variables start as its axes and are reshaped by
primitives (split, fuse, reorder, tile) and annotated (vectorize, parallel, unroll); stages can be
inlined into their consumers (compute_inline) or nested inside them (compute_at).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from ..errors import ScheduleError
from ..tir.expr import Expr, IntImm, Var
from ..tir.stmt import ForKind
from .tensor import ComputeOp, IterVar, PlaceholderOp, Tensor, TensorRead


# Producer point (one index per producer axis) -> consumer point and the condition (None: always)
# under which that consumer point exists; used by reverse_compute_at across a layout change.
PointMap = Callable[[Sequence[Expr]], tuple[Sequence[Expr], Optional[Expr]]]


@dataclass(frozen=True, eq=False)
class Split:
    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: int


@dataclass(frozen=True, eq=False)
class Fuse:
    outer: IterVar
    inner: IterVar
    fused: IterVar


@dataclass(eq=False)
class Stage:
    op: ComputeOp
    leaf_iter_vars: list[IterVar]
    relations: list = field(default_factory=list)
    annotations: dict = field(default_factory=dict)  # IterVar -> ForKind
    inlined: bool = False
    attach: Optional[tuple["Stage", IterVar]] = None  # compute_at target; None = root
    after_producer: bool = False  # attach is a reverse_compute_at: this consumer runs inside its producer's loop
    point_map: Optional[PointMap] = None  # reverse_compute_at: producer point -> (consumer point, valid)
    scope: str = "global"  # "local": a per-call scratch buffer on the stack (cache_write)

    @property
    def tensor(self) -> Tensor:
        return Tensor(self.op)

    @property
    def axis(self) -> tuple[IterVar, ...]:
        return self.op.axis

    @property
    def reduce_axis(self) -> tuple[IterVar, ...]:
        return self.op.reduce_axis

    def _check_leaf(self, iv: IterVar) -> int:
        for pos, leaf in enumerate(self.leaf_iter_vars):
            if leaf is iv:
                return pos
        raise ScheduleError(f"{iv.name} is not a leaf axis of stage {self.op.name}")

    def split(self, iv: IterVar, factor: Optional[int] = None, nparts: Optional[int] = None) -> tuple[IterVar, IterVar]:
        """Split `iv` into (outer, inner) with inner extent `factor` (or outer extent `nparts`)."""
        pos = self._check_leaf(iv)
        if (factor is None) == (nparts is None):
            raise ScheduleError("split takes exactly one of factor or nparts")
        if factor is None:
            factor = -(-iv.extent // max(1, int(nparts)))
        factor = max(1, min(int(factor), iv.extent))
        outer = IterVar(Var(f"{iv.var.name}.o"), -(-iv.extent // factor), iv.kind)
        inner = IterVar(Var(f"{iv.var.name}.i"), factor, iv.kind)
        self.leaf_iter_vars[pos : pos + 1] = [outer, inner]
        self.relations.append(Split(iv, outer, inner, factor))
        return outer, inner

    def fuse(self, *ivs: IterVar) -> IterVar:
        """Fuse adjacent leaf axes (outer to inner) into one."""
        if not ivs:
            raise ScheduleError("fuse needs at least one axis")
        fused = ivs[0]
        for iv in ivs[1:]:
            po, pi = self._check_leaf(fused), self._check_leaf(iv)
            if pi != po + 1:
                raise ScheduleError(f"fuse: {fused.name} and {iv.name} are not adjacent (outer, inner)")
            if fused.kind != iv.kind:
                raise ScheduleError("fuse: cannot fuse a spatial axis with a reduce axis")
            new = IterVar(Var(f"{fused.var.name}.{iv.var.name}.f"), fused.extent * iv.extent, iv.kind)
            self.leaf_iter_vars[po : pi + 1] = [new]
            self.relations.append(Fuse(fused, iv, new))
            fused = new
        return fused

    def reorder(self, *ivs: IterVar) -> None:
        """Put the given leaf axes in this order, in the positions they occupy together."""
        positions = sorted(self._check_leaf(iv) for iv in ivs)
        if len(set(positions)) != len(ivs):
            raise ScheduleError("reorder: an axis is listed twice")
        for pos, iv in zip(positions, ivs):
            self.leaf_iter_vars[pos] = iv

    def tile(self, x: IterVar, y: IterVar, x_factor: int, y_factor: int) -> tuple[IterVar, IterVar, IterVar, IterVar]:
        xo, xi = self.split(x, x_factor)
        yo, yi = self.split(y, y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def _annotate(self, iv: IterVar, kind: ForKind) -> None:
        self._check_leaf(iv)
        self.annotations[iv] = kind

    def vectorize(self, iv: IterVar) -> None:
        self._annotate(iv, ForKind.VECTORIZED)

    def parallel(self, iv: IterVar) -> None:
        if iv.kind == "reduce":
            raise ScheduleError(f"parallel: {iv.name} is a reduce axis (would race on the output)")
        self._annotate(iv, ForKind.PARALLEL)

    def unroll(self, iv: IterVar) -> None:
        self._annotate(iv, ForKind.UNROLLED)

    def compute_inline(self) -> None:
        if self.op.reduce_axis:
            raise ScheduleError(f"compute_inline: {self.op.name} is a reduction and cannot be inlined")
        self.inlined = True

    def compute_at(self, parent: "Stage", iv: IterVar) -> None:
        """Compute this stage inside `parent`'s loop `iv`, only the region that iteration needs."""
        parent._check_leaf(iv)
        self.attach = (parent, iv)

    def reverse_compute_at(self, producer: "Stage", iv: IterVar, point_map: Optional[PointMap] = None) -> None:
        """Compute this consumer inside `producer`'s loop `iv`, right after each iteration has
        finished its part of the producer (TensorIR's reverse_compute_at): a fused epilogue then
        reads a conv's or matmul's tile while it is still in registers or L1, instead of in a
        second pass over memory. `iv` must sit outside the producer's reduce loops, and the
        consumer must read the producer only at its own axes (an elementwise epilogue, possibly
        cropping), through inlined stages; or, given `point_map` (the consumer point that reads a
        producer point, and whether there is one), exactly where that map says, which lowering
        checks."""
        producer._check_leaf(iv)
        if iv.kind == "reduce":
            raise ScheduleError(f"reverse_compute_at: {iv.name} is a reduce axis of {producer.op.name}")
        self.attach = (producer, iv)
        self.after_producer = True
        self.point_map = point_map

    def set_scope(self, scope: str) -> None:
        if scope not in ("global", "local"):
            raise ScheduleError(f"unknown memory scope {scope!r}")
        self.scope = scope


class Schedule:
    """Stages for every compute op reachable from `outputs`, in producer-before-consumer order."""

    def __init__(self, outputs: Sequence[Tensor]):
        self.outputs = list(outputs)
        self.stages: list[Stage] = []
        self._by_op: dict[int, Stage] = {}
        seen: set[int] = set()

        def visit(t: Tensor) -> None:
            if id(t.op) in seen:
                return
            seen.add(id(t.op))
            for inp in t.op.input_tensors:
                visit(inp)
            if isinstance(t.op, ComputeOp):
                stage = Stage(t.op, list(t.op.axis) + list(t.op.reduce_axis))
                self.stages.append(stage)
                self._by_op[id(t.op)] = stage

        for out in self.outputs:
            visit(out)

    def __getitem__(self, tensor: Tensor) -> Stage:
        if isinstance(tensor.op, PlaceholderOp):
            raise ScheduleError(f"{tensor.name} is a placeholder and has no stage")
        try:
            return self._by_op[id(tensor.op)]
        except KeyError:
            raise ScheduleError(f"{tensor.name} is not part of this schedule") from None

    def placeholders(self) -> list[Tensor]:
        found: dict[int, Tensor] = {}
        for stage in self.stages:
            for t in stage.op.input_tensors:
                if isinstance(t.op, PlaceholderOp):
                    found.setdefault(id(t.op), t)
        return list(found.values())


def reads_at_own_axes(sch: Schedule, consumer: ComputeOp, producer: ComputeOp, anywhere: bool = False) -> bool:
    """Whether `consumer` reads `producer` only at its own axes, in order (directly or through
    inlined stages that do the same), and reads no other computed stage (it runs before them).
    With `anywhere`, only the second half: the indices are the caller's to check."""
    from ..tir.functor import walk_expr

    def at_axis(index, iv: IterVar) -> bool:  # a size-1 axis may be read at a literal 0 (broadcast reads)
        return index is iv.var or (iv.extent == 1 and isinstance(index, IntImm) and index.value == 0)

    def ok(op: ComputeOp) -> bool:
        for e in walk_expr(op.body):
            if not isinstance(e, TensorRead) or isinstance(e.tensor.op, PlaceholderOp):
                continue
            read = e.tensor.op
            if read is not producer and not sch[e.tensor].inlined:
                return False
            if not anywhere and (len(e.indices) != len(op.axis)
                                 or not all(at_axis(i, iv) for i, iv in zip(e.indices, op.axis))):
                return False
            if read is not producer and not ok(read):
                return False
        return True

    return ok(consumer)


def create_schedule(outputs: "Tensor | Sequence[Tensor]") -> Schedule:
    return Schedule([outputs] if isinstance(outputs, Tensor) else list(outputs))
