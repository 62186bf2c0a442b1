"""TopK along one axis: a selection program (te.extern) that, per line along the axis, picks the
best not-yet-picked element k times (O(n * k); ties go to the lower index, the order ONNX
specifies) and writes its index; the values are then gathered by a tensor expression."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Buffer, Expr, Not, Var, const, eq, logical_and, logical_or, maximum
from ..tir.stmt import Allocate, For, ForKind, IfThenElse, Stmt, Store, seq
from .common import prod, require
from .registry import register_compute


def _i64(value: int) -> Expr:
    return const(int(value), "int64")


def selection_program(x: Buffer, out: Buffer, axis: int, k: int, largest: bool) -> Stmt:
    """out[o, j, i] = the index along `axis` of the j-th best element of line (o, i)."""
    outer, n, inner = prod(x.shape[:axis]), x.shape[axis], prod(x.shape[axis + 1:])
    picked = Buffer("topk_picked", (max(1, n),), "uint8", "local")
    best = Buffer("topk_best", (1,), "int64", "local")
    o, i, j, t = Var("topk_o"), Var("topk_i"), Var("topk_j"), Var("topk_t")
    zero = _i64(0)

    def at(position: Expr) -> Expr:
        return x.load((o * n + position) * inner + i)

    current = best.load(0)
    candidate, incumbent = at(t), at(maximum(current, zero))  # no read at -1 before the first pick
    better = candidate > incumbent if largest else candidate < incumbent  # strict: the lower index wins ties
    take = logical_and(Not(eq(picked.load(t), const(1, "uint8"))), logical_or(current < zero, better))
    scan = For(t, _i64(n), ForKind.SERIAL, IfThenElse(take, Store(best, zero, t)))
    pick = seq(Store(best, zero, _i64(-1)), scan, Store(picked, current, const(1, "uint8")),
               Store(out, (o * k + j) * inner + i, current))
    clear = For(t, _i64(n), ForKind.SERIAL, Store(picked, t, const(0, "uint8")))
    line = seq(clear, For(j, _i64(k), ForKind.SERIAL, pick))
    body = For(o, _i64(outer), ForKind.SERIAL, For(i, _i64(inner), ForKind.SERIAL, line))
    return Allocate(picked, Allocate(best, body))


@register_compute("TopK")
def top_k(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "TopK")
    axis, k, largest = int(attrs["axis"]), int(attrs["k"]), bool(attrs.get("largest", 1))
    shape = tuple(k if a == axis else d for a, d in enumerate(x.shape))

    def build(ins: list[Buffer], out: Buffer) -> Stmt:
        return selection_program(ins[0], out, axis, k, largest)

    indices = te.extern(shape, [x], build, "int64", name="topk_indices")

    def value(*j: Expr) -> Expr:
        idx = list(j)
        idx[axis] = indices(*j)
        return x(*idx)

    return [te.compute(shape, value, name="topk_values", tag="injective"), indices]
