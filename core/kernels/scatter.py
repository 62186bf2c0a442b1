"""ScatterElements and ScatterND (and TensorScatter, a KV-cache write) as gathers from the output's
point of view: each output element scans the updates that could land on it (for ScatterElements
only those along the scatter axis, so the work is the output size times that axis' length) and
combines the hits with the data element.

Reduction "none" takes the last hit in update order (what ONNX Runtime does for duplicates): one
stage finds its position, a second stage reads it. add/mul/max/min fold the hits with a reduction,
then combine with the data element."""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Expr, cast, const, eq, logical_and, maximum, minimum, select
from .common import require, typed_const
from .indexing import wrap_negative
from .registry import register_compute

_FOLD: dict[str, tuple[Callable, Callable[[str], Any], Callable[[Expr, Expr], Expr]]] = {
    "add": (te.sum, lambda dt: 0, lambda a, b: a + b),
    "mul": (te.prod, lambda dt: 1, lambda a, b: a * b),
    "max": (te.max, te.lowest, maximum),
    "min": (te.min, te.highest, minimum),
}


def _i64(value: int) -> Expr:
    return const(int(value), "int64")


def _all(conds: Sequence[Expr]) -> Optional[Expr]:
    out = None
    for c in conds:
        out = c if out is None else logical_and(out, c)
    return out


def scatter(data: te.Tensor, count: int, hit: Callable[[Sequence[Expr], Expr], Expr],
            update: Callable[[Sequence[Expr], Expr], Expr], reduction: str, name: str) -> te.Tensor:
    """out[p] combines data[p] with update(p, u) for each of `count` candidate updates u where hit(p, u)."""
    if reduction == "none":
        def last_body(*p: Expr) -> Expr:
            u = te.reduce_axis(count, "u")
            return te.max(select(hit(p, u.var), u.var, _i64(-1)), [u])

        last = te.compute(data.shape, last_body, name=f"{name}_last", tag="reduce")
        return te.compute(data.shape, lambda *p: select(last(*p) >= _i64(0), update(p, maximum(last(*p), _i64(0))),
                                                        data(*p)), name=name, tag="injective")
    reducer, identity, combine = _FOLD[reduction]

    def fold_body(*p: Expr) -> Expr:
        u = te.reduce_axis(count, "u")
        return reducer(select(hit(p, u.var), update(p, u.var), typed_const(identity(data.dtype), data.dtype)), [u])

    folded = te.compute(data.shape, fold_body, name=f"{name}_{reduction}", tag="reduce")
    # max/min with no hit fold to the dtype's extreme, which leaves the data element as it is.
    return te.compute(data.shape, lambda *p: combine(data(*p), folded(*p)), name=name, tag="injective")


@register_compute("ScatterElements")
def scatter_elements(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    data, indices, updates = require(inputs, 3, "ScatterElements")
    axis = int(attrs["axis"])

    def source(p: Sequence[Expr], r: Expr) -> list[Expr]:
        idx = list(p)
        idx[axis] = r
        return idx

    def hit(p: Sequence[Expr], r: Expr) -> Expr:
        # Only updates at the same position off the scatter axis can land on p.
        inside = [p[a] < _i64(d) for a, d in enumerate(indices.shape) if a != axis and d < data.shape[a]]
        target = eq(wrap_negative(indices(*_clamped(source(p, r), indices.shape)), data.shape[axis]), p[axis])
        cond = _all(inside)
        return target if cond is None else logical_and(cond, target)

    def update(p: Sequence[Expr], r: Expr) -> Expr:
        return updates(*_clamped(source(p, r), indices.shape))

    return [scatter(data, indices.shape[axis], hit, update, attrs.get("reduction", "none"), "scatter_elements")]


@register_compute("ScatterND")
def scatter_nd(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    data, indices, updates = require(inputs, 3, "ScatterND")
    depth = indices.shape[-1]
    lead = indices.shape[:-1]
    count = 1
    for d in lead:
        count *= d

    def tuple_position(u: Expr) -> list[Expr]:
        # Update number u (row-major over the index tuples) as a position in indices' leading axes.
        pos, stride = [], count
        for d in lead:
            stride //= d
            pos.append((u // stride) % d if d > 1 else _i64(0))
        return pos

    def hit(p: Sequence[Expr], u: Expr) -> Expr:
        q = tuple_position(u)
        conds = [eq(wrap_negative(indices(*q, _i64(a)), data.shape[a]), p[a]) for a in range(depth)]
        return _all(conds) if conds else const(True, "bool")

    def update(p: Sequence[Expr], u: Expr) -> Expr:
        return updates(*tuple_position(u), *p[depth:])

    return [scatter(data, count, hit, update, attrs.get("reduction", "none"), "scatter_nd")]


def _clamped(idx: Sequence[Expr], shape: Sequence[int]) -> list[Expr]:
    """Reads stay inside `shape` for positions that `hit` rules out anyway (p beyond indices' extent)."""
    return [minimum(i, _i64(d - 1)) for i, d in zip(idx, shape)]


@register_compute("TensorScatter")
def tensor_scatter(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    """Cache position t of batch entry b holds update[t - write[b]] (mod the cache length when
    circular) where that offset falls inside the update, else keeps the cache element."""
    cache, update, write = require(inputs, 3, "TensorScatter")
    axis, circular = int(attrs["axis"]), attrs["mode"] == "circular"
    length, seq = cache.shape[axis], update.shape[axis]

    def body(*p: Expr) -> Expr:
        offset = p[axis] - cast("int64", write(p[0]))
        if circular:
            offset = offset % _i64(length)
        idx = list(p)
        idx[axis] = minimum(maximum(offset, _i64(0)), _i64(seq - 1))
        inside = logical_and(offset >= _i64(0), offset < _i64(seq))
        return select(inside, update(*idx), cache(*p))

    return [te.compute(cache.shape, body, name="tensor_scatter", tag="injective")]
