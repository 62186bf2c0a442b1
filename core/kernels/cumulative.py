"""Running sums and products along one axis (CumSum, CumProd; exclusive, reverse).

Each output element is a reduction over the input positions it covers (a masked sum or product),
which keeps the kernel a plain tensor expression that any schedule can tile and parallelize. It
does O(n^2) work along the axis instead of a sequential scan's O(n): the axes these ops see in
models are short, and the TE has no carried-dependency construct to express the scan."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Expr, select
from .common import require, typed_const
from .registry import register_compute


def _covers(k: Expr, i: Expr, exclusive: bool, reverse: bool) -> Expr:
    """Whether input position `k` counts towards output position `i` along the axis."""
    if reverse:
        return k > i if exclusive else k >= i
    return k < i if exclusive else k <= i


def _register(op: str, combiner: str, identity: int) -> None:
    @register_compute(op)
    def compute(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
        (x,) = require(inputs, 1, op)
        axis = int(attrs["axis"])
        exclusive, reverse = bool(attrs.get("exclusive", 0)), bool(attrs.get("reverse", 0))
        neutral = typed_const(identity, x.dtype)
        reducer = te.sum if combiner == "sum" else te.prod

        def body(*i: Expr) -> Expr:
            k = te.reduce_axis(x.shape[axis], "k")
            idx = list(i)
            idx[axis] = k.var
            return reducer(select(_covers(k.var, i[axis], exclusive, reverse), x(*idx), neutral), [k])

        return [te.compute(x.shape, body, name=op.lower(), tag="reduce", attrs={"inner_spatial": 0})]


_register("CumSum", "sum", 0)
_register("CumProd", "prod", 1)
