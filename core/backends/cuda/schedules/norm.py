"""GPU Softmax / LogSoftmax / LayerNormalization: computes whose row statistics each have one reader,
and a schedule with one block per row (threads stride over the row: coalesced), every statistic a
cooperative block reduction in shared memory.

A compute_at stage may have only one reader, so a statistic two stages need (the row max, read by
the sum of exponentials and by the output) is computed twice, once for each: a second pass over a
row the block has just read (from L1/L2) instead of a second kernel over the whole tensor.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ....target import CUDA_KIND
from ....graph.ir import TensorType
from ....target import Target
from ....te import tensor as te
from ....te.schedule import Schedule
from ....te.tensor import Tensor
from ....tir.expr import Expr, call, cast, const
from ....kernels.common import attr, broadcast_read, prod, require
from ....kernels.layer_norm import layer_norm_operands, square
from ....kernels.registry import register_compute
from .launch import is_scheduled, output_stages, reject_extern
from .reduce import attach_reductions, block_threads, schedule_reduce

_REDUCERS = {"sum": te.sum, "max": te.max}


def row_reduce(x: te.Tensor, axes: Sequence[int], combiner: str, source, name: str) -> te.Tensor:
    """combiner of source(index) over `axes` of x, keepdims (reduced axes have extent 1): a plain
    reduction (the CPU's lane-split two-stage form would add a stage with readers of its own)."""
    def body(*i: Expr) -> Expr:
        rks = {a: te.reduce_axis(x.shape[a], f"r{a}") for a in axes}
        idx = [rks[k].var if k in rks else i[k] for k in range(x.ndim)]
        return _REDUCERS[combiner](source(idx), list(rks.values()))

    shape = [1 if k in axes else d for k, d in enumerate(x.shape)]
    return te.compute(shape, body, name=name, tag="gpu_row_stat")


def _row(idx: Sequence[Expr], axes: Sequence[int]) -> list[Expr]:
    return [0 * ix if k in axes else ix for k, ix in enumerate(idx)]


def _wide(dtype: str) -> str:
    return "float32" if dtype == "float16" else dtype


def _softmax(x: te.Tensor, axis: int, log: bool) -> te.Tensor:
    wide = _wide(x.dtype)
    xw = lambda idx: cast(wide, x(*idx))  # noqa: E731
    row_max = lambda tag: row_reduce(x, [axis], "max", lambda idx: x(*idx), f"softmax_max_{tag}")  # noqa: E731
    max_for_sum, max_for_out = row_max("sum"), row_max("out")
    total = row_reduce(x, [axis], "sum", lambda idx: call("exp", xw(idx) - cast(wide, max_for_sum(*_row(idx, [axis])))),
                       "softmax_sum")

    def body(*i: Expr) -> Expr:
        shifted = xw(i) - cast(wide, max_for_out(*_row(i, [axis])))
        at = _row(i, [axis])
        value = shifted - call("log", total(*at)) if log else call("exp", shifted) / total(*at)
        return cast(x.dtype, value)

    return te.compute(x.shape, body, name="log_softmax" if log else "softmax", tag="gpu_row_out",
                      attrs={"row_axes": (axis,)})


def _axis(attrs: Mapping[str, Any], rank: int, op: str) -> int:
    axis = int(attr(attrs, "axis", op, -1))
    return axis + rank if axis < 0 else axis


@register_compute("Softmax", CUDA_KIND)
def softmax_gpu(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "Softmax")
    return [_softmax(x, _axis(attrs, x.ndim, "Softmax"), log=False)]


@register_compute("LogSoftmax", CUDA_KIND)
def log_softmax_gpu(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "LogSoftmax")
    return [_softmax(x, _axis(attrs, x.ndim, "LogSoftmax"), log=True)]


@register_compute("LayerNormalization", CUDA_KIND)
def layer_norm_gpu(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    x, scale, bias, axis, epsilon = layer_norm_operands(inputs, attrs)
    eps = const(epsilon, "float32")
    axes = list(range(axis, x.ndim))
    inv_n = const(1.0 / prod(x.shape[axis:]), "float32")
    xf = lambda idx: cast("float32", x(*idx))  # noqa: E731

    def mean(tag: str) -> te.Tensor:
        return row_reduce(x, axes, "sum", xf, f"layer_norm_sum_{tag}")

    def rstd(tag: str):
        centre = mean(f"{tag}_var")
        sq = row_reduce(x, axes, "sum", lambda idx: square(xf(idx) - centre(*_row(idx, axes)) * inv_n),
                        f"layer_norm_sqsum_{tag}")
        return lambda idx: const(1.0, "float32") / call("sqrt", sq(*_row(idx, axes)) * inv_n + eps)

    centre, inv_std = mean("out"), rstd("out")

    def body(*i: Expr) -> Expr:
        y = (xf(i) - centre(*_row(i, axes)) * inv_n) * inv_std(i) * cast("float32", broadcast_read(scale, i[axis:]))
        if bias is not None:
            y = y + cast("float32", broadcast_read(bias, i[axis:]))
        return cast(x.dtype, y)

    outs = [te.compute(x.shape, body, name="layer_norm", tag="gpu_row_out", attrs={"row_axes": tuple(axes)})]
    shape = tuple(1 if k in axes else d for k, d in enumerate(x.shape))
    if len(out_types) > 1:  # Mean and InvStdDev: statistics of their own (each stage has one reader)
        own_mean = mean("mean")
        outs.append(te.compute(shape, lambda *i: own_mean(*i) * inv_n, name="layer_norm_mean", tag="gpu_row_stat_out"))
    if len(out_types) > 2:
        own_rstd = rstd("rstd")
        outs.append(te.compute(shape, lambda *i: own_rstd(i), name="layer_norm_inv_std", tag="gpu_row_stat_out"))
    return outs


def schedule_row_ops(sch: Schedule, outs: Sequence[Tensor], target: Target, threads: Optional[int] = None) -> None:
    """One block per row of each row-normalizing output (`row_axes`), `threads` (a knob; default: the
    row length rounded up to a power of two, 32..256) striding over the row; the statistics it reads
    are cooperative reductions of the same block. Other outputs: the generic cuda reduction schedule."""
    reject_extern(sch, target)
    rest = []
    for stage in output_stages(sch, outs):
        row_axes = stage.op.attrs.get("row_axes")
        if is_scheduled(stage):
            continue
        if row_axes is None:
            rest.append(Tensor(stage.op))
            continue
        axes = stage.op.axis
        inner = [axes[a] for a in row_axes]
        outer = [iv for iv in axes if iv not in inner]
        stage.reorder(*outer, *inner)
        length = prod(iv.extent for iv in inner)
        row = stage.fuse(*inner) if len(inner) > 1 else inner[0]
        block = outer and (stage.fuse(*outer) if len(outer) > 1 else outer[0])
        if not block:
            block, row = stage.split(row, length)  # a single row: one block
        t = threads or block_threads(length, target)
        serial, thread = stage.split(row, t)
        stage.reorder(block, thread, serial)
        stage.bind(block, "blockIdx.x")
        stage.bind(thread, "threadIdx.x")
        attach_reductions(sch, stage, block, target, "shared")
    if rest:
        schedule_reduce(sch, rest, target)
