"""Softmax and LogSoftmax over one axis, numerically stable: stages max, exp (or sum of exp), normalize."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Expr, call, cast
from .common import attr, require
from .reduce import reduce_over
from .registry import register_compute


def _keep(i: Sequence[Expr], axis: int) -> list[Expr]:
    """Index of a keepdims reduction result along `axis` (that axis reads position 0)."""
    idx = list(i)
    idx[axis] = 0 * idx[axis]
    return idx


def _wide(dtype: str) -> str:
    """The type exp and its sum are computed in: float16 sums of exponentials lose digits fast."""
    return "float32" if dtype == "float16" else dtype


def _axis(attrs: Mapping[str, Any], rank: int, op: str) -> int:
    axis = int(attr(attrs, "axis", op, -1))
    return axis + rank if axis < 0 else axis


@register_compute("Softmax")
def softmax(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "Softmax")
    axis = _axis(attrs, x.ndim, "Softmax")
    wide = _wide(x.dtype)
    mx = reduce_over(x, [axis], True, "max", "softmax_max", tag="softmax_max")
    # exp is materialized once: the sum and the normalization both read it.
    ex = te.compute(x.shape, lambda *i: call("exp", cast(wide, x(*i)) - cast(wide, mx(*_keep(i, axis)))),
                    name="softmax_exp", tag="softmax_exp")
    total = reduce_over(ex, [axis], True, "sum", "softmax_sum", tag="softmax_sum")
    out = te.compute(x.shape, lambda *i: cast(x.dtype, ex(*i) / total(*_keep(i, axis))), name="softmax", tag="softmax")
    return [out]


@register_compute("LogSoftmax")
def log_softmax(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "LogSoftmax")
    axis = _axis(attrs, x.ndim, "LogSoftmax")
    wide = _wide(x.dtype)
    mx = reduce_over(x, [axis], True, "max", "log_softmax_max", tag="softmax_max")

    def shifted(idx) -> Expr:
        return cast(wide, x(*idx)) - cast(wide, mx(*_keep(idx, axis)))

    total = reduce_over(x, [axis], True, "sum", "log_softmax_sum", tag="softmax_sum",
                        source=lambda idx: call("exp", shifted(idx)))
    out = te.compute(x.shape, lambda *i: cast(x.dtype, shifted(i) - call("log", total(*_keep(i, axis)))),
                     name="log_softmax", tag="softmax")
    return [out]
