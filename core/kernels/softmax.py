"""Softmax and LogSoftmax over one axis, numerically stable: stages max, exp (or sum of exp), normalize."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Expr, call
from .common import attr, require
from .reduce import reduce_over
from .registry import register_compute


def _keep(i: Sequence[Expr], axis: int) -> list[Expr]:
    """Index of a keepdims reduction result along `axis` (that axis reads position 0)."""
    idx = list(i)
    idx[axis] = 0 * idx[axis]
    return idx


def _axis(attrs: Mapping[str, Any], rank: int, op: str) -> int:
    axis = int(attr(attrs, "axis", op, -1))
    return axis + rank if axis < 0 else axis


@register_compute("Softmax")
def softmax(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "Softmax")
    axis = _axis(attrs, x.ndim, "Softmax")
    mx = reduce_over(x, [axis], True, "max", "softmax_max", tag="softmax_max")
    # exp is materialized once: the sum and the normalization both read it.
    ex = te.compute(x.shape, lambda *i: call("exp", x(*i) - mx(*_keep(i, axis))), name="softmax_exp", tag="softmax_exp")
    total = reduce_over(ex, [axis], True, "sum", "softmax_sum", tag="softmax_sum")
    out = te.compute(x.shape, lambda *i: ex(*i) / total(*_keep(i, axis)), name="softmax", tag="softmax")
    return [out]


@register_compute("LogSoftmax")
def log_softmax(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "LogSoftmax")
    axis = _axis(attrs, x.ndim, "LogSoftmax")
    mx = reduce_over(x, [axis], True, "max", "log_softmax_max", tag="softmax_max")
    total = reduce_over(x, [axis], True, "sum", "log_softmax_sum", tag="softmax_sum",
                        source=lambda idx: call("exp", x(*idx) - mx(*_keep(idx, axis))))
    out = te.compute(x.shape, lambda *i: x(*i) - mx(*_keep(i, axis)) - call("log", total(*_keep(i, axis))),
                     name="log_softmax", tag="softmax")
    return [out]
