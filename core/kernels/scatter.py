"""ScatterElements and ScatterND as sequential programs (te.extern): copy the data, then apply the
updates in order, each combined with the element it lands on (reduction none/add/mul/max/min; for
none a duplicate index keeps the last update, as ONNX Runtime does). O(data + updates).
TensorScatter (a KV-cache write) is an injective gather instead: each cache element knows its source."""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Buffer, Expr, Var, cast, const, logical_and, maximum, minimum, select
from ..tir.index_guard import checked_index
from ..tir.stmt import For, ForKind, Stmt, Store, seq
from .common import prod, require
from .registry import register_compute

_COMBINE: dict[str, Callable[[Expr, Expr], Expr]] = {
    "none": lambda old, new: new,
    "add": lambda old, new: old + new,
    "mul": lambda old, new: old * new,
    "max": maximum,
    "min": minimum,
}


def _i64(value: int) -> Expr:
    return const(int(value), "int64")


def _loop(name: str, extent: int, body_fn: Callable[[Var], Stmt]) -> Stmt:
    var = Var(name)
    return For(var, _i64(extent), ForKind.SERIAL, body_fn(var))


def _unravel(flat: Expr, shape: Sequence[int]) -> list[Expr]:
    idx, stride = [], prod(shape)
    for d in shape:
        stride //= d
        idx.append((flat // stride) % d if d > 1 else _i64(0))
    return idx


def _flatten(idx: Sequence[Expr], shape: Sequence[int]) -> Expr:
    flat = _i64(0)
    for i, d in zip(idx, shape):
        flat = flat * d + i
    return flat


def _copy(data: Buffer, out: Buffer) -> Stmt:
    return _loop("copy", data.numel, lambda f: Store(out, f, data.load(f)))


def scatter_elements_program(data: Buffer, indices: Buffer, updates: Buffer, out: Buffer, axis: int,
                             reduction: str) -> Stmt:
    combine = _COMBINE[reduction]

    def apply(u: Var) -> Stmt:
        position = _unravel(u, indices.shape)
        position[axis] = checked_index(indices.load(u), data.shape[axis])
        at = _flatten(position, data.shape)
        return Store(out, at, combine(out.load(at), updates.load(u)))

    return seq(_copy(data, out), _loop("update", indices.numel, apply))


def scatter_nd_program(data: Buffer, indices: Buffer, updates: Buffer, out: Buffer, reduction: str) -> Stmt:
    combine = _COMBINE[reduction]
    depth = indices.shape[-1]
    tuples = indices.numel // depth
    width = prod(data.shape[depth:])  # elements each index tuple addresses

    def apply(q: Var) -> Stmt:
        lead = [checked_index(indices.load(q * depth + a), data.shape[a]) for a in range(depth)]
        base = _flatten(lead, data.shape[:depth]) * width

        def element(s: Var) -> Stmt:
            at = base + s
            return Store(out, at, combine(out.load(at), updates.load(q * width + s)))

        return _loop("element", width, element)

    return seq(_copy(data, out), _loop("tuple", tuples, apply))


@register_compute("ScatterElements")
def scatter_elements(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    data, indices, updates = require(inputs, 3, "ScatterElements")
    axis, reduction = int(attrs["axis"]), attrs.get("reduction", "none")

    def build(ins: list[Buffer], out: Buffer) -> Stmt:
        return scatter_elements_program(ins[0], ins[1], ins[2], out, axis, reduction)

    return [te.extern(data.shape, [data, indices, updates], build, data.dtype, name="scatter_elements")]


@register_compute("ScatterND")
def scatter_nd(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    data, indices, updates = require(inputs, 3, "ScatterND")
    reduction = attrs.get("reduction", "none")

    def build(ins: list[Buffer], out: Buffer) -> Stmt:
        return scatter_nd_program(ins[0], ins[1], ins[2], out, reduction)

    return [te.extern(data.shape, [data, indices, updates], build, data.dtype, name="scatter_nd")]


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
