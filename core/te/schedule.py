"""Schedules: how a tensor expression is computed (loop structure), kept apart from the compute.

Each compute op gets a Stage whose leaf iteration variables start as its axes and are reshaped by
primitives (split, fuse, reorder, tile) and annotated (vectorize, parallel, unroll, pragma); stages
can be inlined into their consumers (compute_inline) or nested inside them (compute_at), padded
(storage_align), and given a scratch copy (Schedule.cache_read / cache_write, at the end); a loop
nest that computes a hardware instruction's declaration becomes that instruction (tensorize, tensorize.py).
On a GPU, loops are bound to the launch grid (bind) and copies live in "shared" or "local" memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from ..errors import ScheduleError
from ..tir.expr import Expr, IntImm, Var
from ..tir.functor import rewrite_expr, substitute
from ..tir.stmt import ForKind
from .tensor import ComputeOp, IterVar, PlaceholderOp, Reduce, Tensor, TensorRead, _ids


# Producer point (one index per producer axis) -> consumer point and the condition (None: always)
# under which that consumer point exists; used by reverse_compute_at across a layout change.
PointMap = Callable[[Sequence[Expr]], tuple[Sequence[Expr], Optional[Expr]]]

THREAD_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z")
SCOPES = ("global", "shared", "local")


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
    scope: str = "global"  # "local": a per-call scratch buffer on the stack; "shared": a GPU block's
    bindings: dict = field(default_factory=dict)  # IterVar -> thread tag ("blockIdx.x", ...)
    pragmas: dict = field(default_factory=dict)  # IterVar -> {key: value}: codegen hints on that loop
    aligns: dict = field(default_factory=dict)  # axis position -> (factor, offset) of that axis' stride
    body_override: Optional[Expr] = None  # what cache_read/cache_write made this stage compute instead
    tensorized: dict = field(default_factory=dict)  # IterVar -> TensorIntrinsic replacing its loop nest
    # axis position -> a read of a run-time length: past it the points are padding nobody reads (core/te/run_time_bounds.py)
    run_time_bounds: dict = field(default_factory=dict)

    @property
    def body(self) -> Expr:
        """What this stage computes: the op's body unless a cache primitive redirected its reads."""
        return self.op.body if self.body_override is None else self.body_override

    @property
    def tensor(self) -> Tensor:
        return Tensor(self.op)

    @property
    def axis(self) -> tuple[IterVar, ...]:
        return self.op.axis

    @property
    def reduce_axis(self) -> tuple[IterVar, ...]:
        return self.body.axis if isinstance(self.body, Reduce) else ()

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
        if iv in self.pragmas:
            raise ScheduleError(f"{iv.name} carries a pragma, which needs a serial loop")
        if iv in self.bindings and kind is not ForKind.THREAD_BINDING:
            raise ScheduleError(f"{iv.name} is bound to {self.bindings[iv]} and cannot also be {kind.value}")
        self.annotations[iv] = kind

    def pragma(self, iv: IterVar, key: str, value: int) -> None:
        """A codegen hint on loop `iv` that keeps it one serial loop: ("unroll", n) asks LLVM to
        unroll it n times (llvm.loop.unroll.count), with a remainder, unlike unroll() which copies
        the whole body at lowering."""
        self._check_leaf(iv)
        if key != "unroll":
            raise ScheduleError(f"pragma: unknown key {key!r} (known: 'unroll')")
        if not isinstance(value, int) or value < 1:
            raise ScheduleError(f"pragma unroll: the count must be a positive int, got {value!r}")
        if self.annotations.get(iv, ForKind.SERIAL) is not ForKind.SERIAL:
            raise ScheduleError(f"pragma: {iv.name} is {self.annotations[iv].value}, not a serial loop")
        self.pragmas.setdefault(iv, {})["pragma_" + key] = value

    def storage_align(self, iv: IterVar, factor: int, offset: int = 0) -> None:
        """Pad this stage's buffer so that the stride of axis `iv` (elements between consecutive
        values of iv) is factor * k + offset, as TVM's storage_align: rows of a power-of-two width
        then stop mapping to the same cache sets. The axis must not be the innermost one."""
        positions = [k for k, ax in enumerate(self.op.axis) if ax is iv]
        if not positions:
            raise ScheduleError(f"storage_align: {iv.name} is not an axis of {self.op.name}")
        if positions[0] == len(self.op.axis) - 1:
            raise ScheduleError(f"storage_align: {iv.name} is the innermost axis of {self.op.name} (stride 1)")
        if factor < 1 or not 0 <= offset < factor:
            raise ScheduleError(f"storage_align: need factor >= 1 and 0 <= offset < factor, got {factor}, {offset}")
        if self.inlined:
            raise ScheduleError(f"storage_align: {self.op.name} is inlined and has no buffer")
        self.aligns[positions[0]] = (int(factor), int(offset))

    def tensorize(self, iv: IterVar, intrinsic) -> None:
        """Replace the loop nest from leaf `iv` down with one call of `intrinsic` (a TensorIntrinsic,
        core/te/tensorize.py); lowering checks that the nest computes what the intrinsic declares."""
        self._check_leaf(iv)
        if self.annotations.get(iv, ForKind.SERIAL) is not ForKind.SERIAL or iv in self.pragmas:
            raise ScheduleError(f"tensorize: {iv.name} is annotated; the tensorized loop must be a plain serial loop")
        inner = self.leaf_iter_vars[self.leaf_iter_vars.index(iv):]
        if any(self.annotations.get(v, ForKind.SERIAL) is not ForKind.SERIAL for v in inner):
            raise ScheduleError(f"tensorize: a loop inside {iv.name} is vectorized, unrolled or parallel")
        self.tensorized[iv] = intrinsic

    def vectorize(self, iv: IterVar) -> None:
        self._annotate(iv, ForKind.VECTORIZED)

    def bind(self, iv: IterVar, tag: str) -> None:
        """Run loop `iv` as the GPU launch axis `tag`: one block (blockIdx.*) or thread (threadIdx.*)
        per iteration. Stages of one kernel that bind the same tag share that launch axis (stages
        computed inside a block reuse its threads cooperatively)."""
        if tag not in THREAD_TAGS:
            raise ScheduleError(f"bind: unknown thread tag {tag!r} (known: {', '.join(THREAD_TAGS)})")
        if iv.kind == "reduce":
            raise ScheduleError(f"bind: {iv.name} is a reduce axis of {self.op.name} (threads would race on "
                                f"the output); split it and bind a spatial axis, or reduce across threads")
        if tag in self.bindings.values():
            raise ScheduleError(f"bind: {self.op.name} already binds a loop to {tag}")
        self._annotate(iv, ForKind.THREAD_BINDING)
        self.bindings[iv] = tag

    def parallel(self, iv: IterVar) -> None:
        if iv.kind == "reduce":
            raise ScheduleError(f"parallel: {iv.name} is a reduce axis (would race on the output)")
        self._annotate(iv, ForKind.PARALLEL)

    def unroll(self, iv: IterVar) -> None:
        self._annotate(iv, ForKind.UNROLLED)

    def compute_inline(self) -> None:
        if self.reduce_axis:
            raise ScheduleError(f"compute_inline: {self.op.name} is a reduction and cannot be inlined")
        self.inlined = True

    def compute_at(self, parent: "Stage", iv: IterVar) -> None:
        """Compute this stage inside `parent`'s loop `iv`, only the region that one iteration of
        iv reads (bound.py infers it from parent's reads over the loops inside iv), into a local
        buffer of that size. Lowering checks that parent is this stage's only reader."""
        if parent is self:
            raise ScheduleError(f"compute_at: {self.op.name} cannot be computed inside itself")
        try:
            parent._check_leaf(iv)
        except ScheduleError:
            raise ScheduleError(f"compute_at: {iv.name} is not a loop (leaf axis) of {parent.op.name}") from None
        if self.inlined or parent.inlined:
            raise ScheduleError(f"compute_at: {self.op.name} or {parent.op.name} is inlined")
        stage: Optional[Stage] = parent
        while stage is not None:  # attaching inside one's own consumer chain would be a cycle
            if stage is self:
                raise ScheduleError(f"compute_at: {parent.op.name} is computed inside {self.op.name}")
            stage = stage.attach[0] if stage.attach is not None else None
        self.attach = (parent, iv)
        self.after_producer = False
        self.point_map = None

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
        _check_scope(scope)
        self.scope = scope


class Schedule:
    """Stages for every compute op reachable from `outputs`, in producer-before-consumer order."""

    def __init__(self, outputs: Sequence[Tensor]):
        self.outputs = list(outputs)
        self.stages: list[Stage] = []
        self._by_op: dict[int, Stage] = {}
        # placeholder op id -> axis -> (a read of a run-time length, the number the input holds past it)
        self.run_time_fills: dict[int, dict[int, tuple]] = {}
        # kernel arguments laid out at run-time lengths (op id -> axis -> a read of the length): core/te/lower.py
        self.run_time_layouts: dict[int, dict[int, object]] = {}
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

    def cache_write(self, tensor: Tensor, scope: str = "local") -> Tensor:
        return cache_write(self, tensor, scope)

    def cache_read(self, tensor: Tensor, scope: str, readers: Sequence[Tensor]) -> Tensor:
        return cache_read(self, tensor, scope, readers)

    def add_stage(self, stage: Stage, before: Stage) -> None:
        """Register a stage a primitive created, placed just before `before` (its first reader)."""
        self.stages.insert(self.stages.index(before), stage)
        self._by_op[id(stage.op)] = stage

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
        for e in walk_expr(sch[Tensor(op)].body):
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


# -- cache_read / cache_write: a stage's input or output given a scratch copy (TVM te semantics) --------------
# Both add a stage and redirect reads to it; compute_at then places that stage inside a consumer's tile so that
# the copy is only the tile's region (a local accumulator, a packed panel).
def _fresh_axes(axes: Sequence[IterVar], suffix: str) -> tuple[IterVar, ...]:
    # Vars compare by name, so every new loop variable needs a name no other stage uses.
    uid = next(_ids)
    return tuple(IterVar(Var(f"{iv.var.name}.{suffix}{uid}", iv.var.dtype), iv.extent, iv.kind) for iv in axes)


def _check_scope(scope: str) -> None:
    if scope not in SCOPES:
        raise ScheduleError(f"unknown memory scope {scope!r} (known: {', '.join(SCOPES)})")


def _unscheduled(stage: Stage, primitive: str) -> None:
    if stage.relations or stage.annotations or stage.pragmas or stage.attach is not None or stage.inlined:
        raise ScheduleError(f"{primitive}: apply it to {stage.op.name} before splitting, annotating, "
                            f"attaching or inlining that stage")


def cache_write(sch: Schedule, tensor: Tensor, scope: str = "local") -> Tensor:
    """A new stage `tensor.scope` that computes what `tensor` did (its reduction accumulates
    there); `tensor`'s stage becomes a copy of it. Returns the cache tensor, whose stage is
    usually compute_at'd inside a tile of `tensor`'s loops: the tile then accumulates in a small
    local buffer and is written to `tensor` once."""
    _check_scope(scope)
    stage = sch[tensor]
    _unscheduled(stage, "cache_write")
    op = stage.op
    body = stage.body
    axes = _fresh_axes(op.axis, scope[0])
    mapping = {old.var: new.var for old, new in zip(op.axis, axes)}
    if isinstance(body, Reduce):
        raxes = _fresh_axes(body.axis, scope[0])
        mapping.update({old.var: new.var for old, new in zip(body.axis, raxes)})
        new_body = Reduce(body.combiner, substitute(body.source, mapping), raxes, body.init)
    else:
        raxes = ()
        new_body = substitute(body, mapping)
    cache_op = ComputeOp(f"{op.name}.{scope}", op.shape, op.dtype, axes, new_body)
    cache_stage = Stage(cache_op, list(axes) + list(raxes), scope=scope)
    sch.add_stage(cache_stage, before=stage)
    stage.body_override = TensorRead(Tensor(cache_op), tuple(iv.var for iv in op.axis))
    stage.leaf_iter_vars = list(op.axis)
    return Tensor(cache_op)


def cache_read(sch: Schedule, tensor: Tensor, scope: str, readers: Sequence[Tensor]) -> Tensor:
    """A new stage `tensor.scope` that copies `tensor`; `readers` read the copy instead. Returns
    the copy, usually compute_at'd inside a reader's loop so that it holds only that loop's
    region (a panel that stays in cache, a contiguous packed tile)."""
    _check_scope(scope)
    if not readers:
        raise ScheduleError(f"cache_read of {tensor.name}: name at least one reader")
    axes = _fresh_axes(tuple(IterVar(Var(f"ax{k}"), d) for k, d in enumerate(tensor.shape)), scope[0])
    cache_op = ComputeOp(f"{tensor.name}.{scope}", tensor.shape, tensor.dtype, axes,
                         TensorRead(tensor, tuple(iv.var for iv in axes)))
    cache_tensor = Tensor(cache_op)
    reader_stages = [sch[r] for r in readers]

    def redirect(e):
        if isinstance(e, TensorRead) and e.tensor.op is tensor.op:
            return TensorRead(cache_tensor, e.indices)
        return None

    for stage in reader_stages:
        new_body = rewrite_expr(stage.body, redirect)
        if new_body is stage.body:
            raise ScheduleError(f"cache_read: {stage.op.name} does not read {tensor.name}")
        stage.body_override = new_body
    first = min(reader_stages, key=sch.stages.index)
    sch.add_stage(Stage(cache_op, list(axes), scope=scope), before=first)
    return cache_tensor
