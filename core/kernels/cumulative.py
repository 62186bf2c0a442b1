"""Running sums and products along one axis (CumSum, CumProd; exclusive, reverse) as a sequential
scan (te.extern): per position off the axis, one pass along it carrying the running value, O(n)."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Buffer, Expr, Var, const
from ..tir.stmt import Allocate, For, ForKind, Stmt, Store, seq
from .common import prod, require, typed_const
from .registry import register_compute


def _i64(value: int) -> Expr:
    return const(int(value), "int64")


def scan_program(x: Buffer, out: Buffer, axis: int, combiner: str, identity: int, exclusive: bool,
                 reverse: bool) -> Stmt:
    """out[..., k, ...] = x combined over the positions up to k along `axis` (from the end when
    `reverse`; without k itself when `exclusive`)."""
    outer, n, inner = prod(x.shape[:axis]), x.shape[axis], prod(x.shape[axis + 1:])
    acc = Buffer("scan_acc", (1,), x.dtype, "local")
    o, i, k = Var("scan_o"), Var("scan_i"), Var("scan_k")
    step = (_i64(n - 1) - k) if reverse else k
    at = (o * n + step) * inner + i
    value = x.load(at)
    combined = acc.load(0) + value if combiner == "sum" else acc.load(0) * value
    zero = _i64(0)
    if exclusive:  # write what came before, then take this element in
        body = seq(Store(out, at, acc.load(0)), Store(acc, zero, combined))
    else:
        body = seq(Store(acc, zero, combined), Store(out, at, acc.load(0)))
    along = For(k, _i64(n), ForKind.SERIAL, body)
    per_line = seq(Store(acc, zero, typed_const(identity, x.dtype)), along)
    return Allocate(acc, For(o, _i64(outer), ForKind.SERIAL, For(i, _i64(inner), ForKind.SERIAL, per_line)))


def _register(op: str, combiner: str, identity: int) -> None:
    @register_compute(op)
    def compute(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
        (x,) = require(inputs, 1, op)
        axis = int(attrs["axis"])
        exclusive, reverse = bool(attrs.get("exclusive", 0)), bool(attrs.get("reverse", 0))

        def build(ins: list[Buffer], out: Buffer) -> Stmt:
            return scan_program(ins[0], out, axis, combiner, identity, exclusive, reverse)

        return [te.extern(x.shape, [x], build, x.dtype, name=op.lower())]


_register("CumSum", "sum", 0)
_register("CumProd", "prod", 1)
