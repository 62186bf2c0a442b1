"""cache_read / cache_write: give a stage's input or output a scratch copy (TVM te semantics).

Both add a stage and redirect reads to it; compute_at then places that stage inside a consumer's
tile so that the copy is only the tile's region (a local accumulator, a packed panel).
"""
from __future__ import annotations

from typing import Sequence

from ..errors import ScheduleError
from ..tir.expr import Var
from ..tir.functor import rewrite_expr, substitute
from .schedule import SCOPES, Schedule, Stage
from .tensor import ComputeOp, IterVar, Reduce, Tensor, TensorRead, _ids



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
