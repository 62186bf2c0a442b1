"""Reduction computes: ReduceSum/Mean/Max/Min/Prod over sorted axes, ArgMax/ArgMin (extreme, then its
position), and the shared `reduce_over` builder."""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

from ..errors import ShapeError
from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Expr, cast, const, eq, is_float, select
from .common import prod, require
from .reduce_lanes import flat_shape, lane_split_applies, lane_split_reduce, trailing_axes_flat
from .registry import register_compute

_REDUCERS = {"sum": te.sum, "max": te.max, "min": te.min, "prod": te.prod}


def reduce_over(x: te.Tensor, axes: Sequence[int], keepdims: bool, combiner: str, name: str,
                source: Optional[Callable[[list[Expr]], Expr]] = None, tag: str = "reduce") -> te.Tensor:
    """`combiner` of `source(input indices)` (default: x itself) over `axes` of `x`.

    The op records `inner_spatial`: how many trailing output axes lie after the last reduced axis,
    i.e. stay contiguous in the input, so schedules can put them inside the reduce loops."""
    axes = sorted({a + x.ndim if a < 0 else a for a in axes})
    if any(not 0 <= a < x.ndim for a in axes):
        raise ShapeError(f"{name}: axes {list(axes)} out of range for rank {x.ndim}")
    kept = [d for k, d in enumerate(x.shape) if k not in axes]
    shape = [1 if k in axes else d for k, d in enumerate(x.shape)] if keepdims else kept
    inner_spatial = x.ndim - 1 - axes[-1] if axes else 0
    read = source or (lambda idx: x(*idx))
    if lane_split_applies(x, axes, combiner):  # along the contiguous axis: vector lanes, not a scalar chain
        return lane_split_reduce(x, keepdims, combiner, name, read, tag)
    if trailing_axes_flat(x, axes, keepdims, combiner):  # several trailing axes: one flattened contiguous axis
        shape, unflatten = flat_shape(x, axes)
        return lane_split_reduce(x, keepdims, combiner, name, lambda idx: read(unflatten(idx)), tag, shape)

    def body(*i: Expr) -> Expr:
        rks = [te.reduce_axis(x.shape[a], f"r{a}") for a in axes]
        it_out, it_r = iter(i), iter(rks)
        idx = []
        for k in range(x.ndim):
            if k in axes:
                if keepdims:
                    next(it_out)
                idx.append(next(it_r).var)
            else:
                idx.append(next(it_out))
        return _REDUCERS[combiner](read(idx), rks)

    return te.compute(shape, body, name=name, tag=tag, attrs={"inner_spatial": inner_spatial})


def _axes(attrs: Mapping[str, Any], rank: int) -> list[int]:
    axes = attrs.get("axes")
    return list(range(rank)) if axes is None or len(axes) == 0 else [int(a) for a in axes]


def _register(op: str, combiner: str) -> None:
    @register_compute(op)
    def compute(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
        (x,) = require(inputs, 1, op)
        axes, keepdims = _axes(attrs, x.ndim), bool(attrs.get("keepdims", 1))
        red = reduce_over(x, axes, keepdims, combiner, op)
        if op != "ReduceMean":
            return [red]
        count = prod(x.shape[a] for a in axes)
        if is_float(x.dtype):
            return [te.compute(red.shape, lambda *i: red(*i) / const(count, red.dtype), name="reduce_mean",
                               tag="reduce_out")]
        # Integer mean truncates like ONNX Runtime's integer division.
        return [te.compute(red.shape, lambda *i: cast(red.dtype, red(*i) / const(count, red.dtype)),
                           name="reduce_mean", tag="reduce_out")]


for _op, _comb in (("ReduceSum", "sum"), ("ReduceMean", "sum"), ("ReduceMax", "max"), ("ReduceMin", "min"),
                   ("ReduceProd", "prod")):
    _register(_op, _comb)


def _register_arg(op: str, combiner: str) -> None:
    @register_compute(op)
    def compute(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
        (x,) = require(inputs, 1, op)
        axis = int(attrs["axis"])
        keepdims, last = bool(attrs.get("keepdims", 1)), bool(attrs.get("select_last_index", 0))
        peak = reduce_over(x, [axis], True, combiner, f"{op.lower()}_peak")
        extent = x.shape[axis]
        shape = [1 if a == axis else d for a, d in enumerate(x.shape)] if keepdims else \
            [d for a, d in enumerate(x.shape) if a != axis]

        def body(*i: Expr) -> Expr:
            k = te.reduce_axis(extent, "k")
            outer = list(i[:axis]) + [const(0, "int64")] + list(i[axis + (1 if keepdims else 0):])
            at_k = list(outer)
            at_k[axis] = k.var
            hit = eq(x(*at_k), peak(*outer))
            # The first extreme is the smallest hit position, the last one the largest.
            if last:
                return te.max(select(hit, k.var, const(-1, "int64")), [k])
            return te.min(select(hit, k.var, const(extent, "int64")), [k])

        return [te.compute(shape, body, name=op.lower(), tag="reduce", attrs={"inner_spatial": 0})]


_register_arg("ArgMax", "max")
_register_arg("ArgMin", "min")
