"""ConvND compute (3-D convs, and 1-D to 3-D transposed convs): a pad stage, the conv, a bias stage.

As in the 2-D conv (conv2d.py, window.py), the padded input is its own stage so that the FMA loop
reads a dense buffer without bounds checks; a strided last axis is split into stride phases,
P[..., phase, j] = padded[..., j*stride + phase], so that consecutive output columns read
consecutive elements (vector loads, not gathers). The bias (and the crop of the extra columns an
odd-width output computes) is an elementwise stage after the reduction, which fusion merges into
the kernel's epilogue. PoolND (pool_nd.py) reads its windows through the same padded source.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..graph.op_defs.conv_nd import conv_nd_shape, conv_nd_window
from ..te import tensor as te
from ..tir.expr import Expr, const, logical_and, select
from .common import require, typed_const
from .conv2d import WIDTH_UNIT
from .registry import register_compute


class PaddedSource:
    """Reads element (o*s + k*d) of every spatial axis of the padded input, whatever its layout."""

    def __init__(self, tensor: te.Tensor, strides: Sequence[int], dilations: Sequence[int], phases: int):
        self.tensor, self.strides, self.dilations, self.phases = tensor, tuple(strides), tuple(dilations), phases

    def read(self, n: Expr, c: Expr, out: Sequence[Expr], taps: Sequence[Expr]) -> Expr:
        at = [o * s + k * d for o, k, s, d in zip(out[:-1], taps[:-1], self.strides[:-1], self.dilations[:-1])]
        s, d = self.strides[-1], self.dilations[-1]
        if not self.phases:
            return self.tensor(n, c, *at, out[-1] * s + taps[-1] * d)
        if self.phases == 1:  # a one-tap last axis: the strided columns, subsampled
            return self.tensor(n, c, *at, const(0, "int64"), out[-1])
        return self.tensor(n, c, *at, (taps[-1] * d) % s, out[-1] + (taps[-1] * d) // s)


def padded_source(x: te.Tensor, out: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                  dilations: Sequence[int], pads: Sequence[int], fill: Optional[Expr] = None,
                  name: str = "conv_nd_pad") -> PaddedSource:
    """The input as a window op reads it: `x` itself when no axis is padded or strided, else a stage
    (named and tagged `name`) holding exactly the rows the windows reach, `fill` (default 0) outside `x`."""
    spatial = len(out)
    sizes = x.shape[2:]
    need = [(out[a] - 1) * strides[a] + (kernel[a] - 1) * dilations[a] + 1 for a in range(spatial)]
    begins = list(pads[:spatial])
    stride_w = strides[-1]
    if not any(begins) and all(need[a] <= sizes[a] for a in range(spatial)) and stride_w == 1:
        return PaddedSource(x, strides, dilations, 0)
    fill_value = typed_const(0, x.dtype) if fill is None else fill

    def padded(n: Expr, c: Expr, at: Sequence[Expr]) -> Expr:
        inside: Expr | None = None
        idx = []
        for a, i in enumerate(at):
            j = i - begins[a] if begins[a] else i
            idx.append(j)
            conds = ([j >= 0] if begins[a] else []) + ([j < sizes[a]] if need[a] - begins[a] > sizes[a] else [])
            for cond in conds:
                inside = cond if inside is None else logical_and(inside, cond)
        value = x(n, c, *idx)
        return value if inside is None else select(inside, value, fill_value)

    lead = tuple(x.shape[:2]) + tuple(need[:-1])
    if stride_w == 1:
        stage = te.compute(lead + (need[-1],), lambda n, c, *at: padded(n, c, at), name=name, tag=name)
        return PaddedSource(stage, strides, dilations, 0)
    phases = 1 if kernel[-1] == 1 else stride_w
    cols = out[-1] if phases == 1 else -(-need[-1] // stride_w)

    def split(n: Expr, c: Expr, *at: Expr) -> Expr:
        *rows, phase, j = at
        return padded(n, c, list(rows) + [j * stride_w + phase])

    stage = te.compute(lead + (phases, cols), split, name=name, tag=name)
    return PaddedSource(stage, strides, dilations, phases)


@register_compute("ConvND")
def conv_nd(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    x, w = require(inputs, 2, "ConvND")
    bias = inputs[2] if len(inputs) > 2 else None
    types = [TensorType(t.shape, t.dtype) for t in inputs if t is not None]
    shape = conv_nd_shape(types, attrs)
    spatial, group = x.ndim - 2, int(attrs.get("group", 1))
    strides, dilations, pads = conv_nd_window(spatial, attrs)
    kernel = tuple(w.shape[2:])
    # As in conv2d.py: odd widths (28, 14, 7...) would make odd vector lengths, which LLVM splits badly;
    # the conv computes a few extra columns (reading zeros) instead, and the final stage crops them.
    ow = shape[-1]
    ow_c = ow if ow % WIDTH_UNIT == 0 or ow <= WIDTH_UNIT // 2 else -(-ow // WIDTH_UNIT) * WIDTH_UNIT
    computed = shape[:-1] + (ow_c,)
    src = padded_source(x, computed[2:], kernel, strides, dilations, pads)
    cg, mg = w.shape[1], w.shape[0] // group
    rc = te.reduce_axis(cg, "rc")
    taps = [te.reduce_axis(k, f"rk{a}") for a, k in enumerate(kernel)]
    stage_attrs = {"group": group, "depthwise": group > 1 and cg == 1, "kernel": kernel, "strides": strides,
                   "dilations": dilations}

    def body(n: Expr, m: Expr, *o: Expr) -> Expr:
        channel = rc.var if group == 1 else (m // mg) * cg + rc.var
        value = src.read(n, channel, o, [t.var for t in taps])
        return te.sum(value * w(m, rc.var, *[t.var for t in taps]), [rc] + taps)

    out = te.compute(computed, body, name="conv_nd", tag="conv_nd", attrs=stage_attrs)
    if bias is not None:
        return [te.compute(shape, lambda n, m, *o: out(n, m, *o) + bias(m), name="conv_nd_bias", tag="conv_nd_bias")]
    if computed != shape:
        return [te.compute(shape, lambda n, m, *o: out(n, m, *o), name="conv_nd_crop", tag="conv_nd_bias")]
    return [out]
