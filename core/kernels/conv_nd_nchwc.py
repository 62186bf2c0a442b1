"""ConvNDNCHWc compute: a 3-D conv (dense, grouped or depthwise) on NCDHW[x]c data with packed OIDHW[x]i[y]o
weights, conv2d_nchwc.py with one more spatial axis; stages: pad (only when padded), the reduction
(tag conv_nd_nchwc), bias or crop (tag conv_nd_nchwc_bias, the epilogue fusion merges into)."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..errors import ShapeError
from ..graph.ir import TensorType
from ..graph.op_defs.conv_nd import conv_nd_window
from ..te import tensor as te
from ..tir.expr import Expr
from .common import require
from .conv2d import conv_out_size
from .conv2d_nchwc import widened_columns
from .registry import register_compute
from .transform import pad


def padded_blocked_input(x: te.Tensor, out: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                         dilations: Sequence[int], pads: Sequence[int], fill: Any, name: str) -> te.Tensor:
    """A blocked (N, C/x, *spatial, x) input padded (or cropped) to exactly the rows the windows of `out` reach
    (`x` itself when that is all of it); the block is the vector axis, so strides need no phase split."""
    spatial = len(out)
    need = [(out[a] - 1) * strides[a] + (kernel[a] - 1) * dilations[a] + 1 for a in range(spatial)]
    ends = [need[a] - x.shape[2 + a] - pads[a] for a in range(spatial)]
    if not any(pads[:spatial]) and not any(ends):
        return x
    return pad(x, (0, 0, *pads[:spatial], 0), (0, 0, *ends, 0), value=fill, name=name, tag=name)


def conv_nd_nchwc(x: te.Tensor, w: te.Tensor, strides: Sequence[int], pads: Sequence[int],
                  dilations: Sequence[int], depthwise: bool, group: int = 1) -> te.Tensor:
    """out[n, oc, *o, ob] = sum over (ic, *k, ib) of in[n, g(oc) + ic, *(o*s + k*d), ib] * w[oc, ic, *k, ib, ob]
    (g(oc): the first input block of oc's group); depthwise: over k of in[n, oc, ..., ob] * w[oc, 0, *k, 0, ob]."""
    n, icb, *sizes, ib = x.shape
    ocb, wicb, *kernel, wib, ob = w.shape
    spatial = len(sizes)
    grouped_ok = icb == wicb * group and ocb % group == 0
    if len(kernel) != spatial or (depthwise and (icb != ocb or ib != ob)) \
            or (not depthwise and (not grouped_ok or ib != wib)):
        raise ShapeError(f"ConvNDNCHWc: input {list(x.shape)} and weights {list(w.shape)} do not agree"
                         + (f" with group={group}" if group > 1 else ""))
    out = [conv_out_size(sizes[a], kernel[a], strides[a], pads[a], pads[spatial + a], dilations[a])
           for a in range(spatial)]
    if min(out) <= 0:
        raise ShapeError(f"ConvNDNCHWc: kernel {kernel} does not fit the padded input {list(x.shape)}")
    computed = out[:-1] + [widened_columns(out[-1])]
    src = padded_blocked_input(x, computed, kernel, strides, dilations, pads, 0, "conv_nd_nchwc_pad")
    taps = [te.reduce_axis(k, f"rk{a}") for a, k in enumerate(kernel)]
    attrs = {"strides": tuple(strides), "kernel": tuple(kernel), "depthwise": depthwise, "width": out[-1],
             "group": group}

    def at(o: Sequence[Expr]) -> list[Expr]:
        return [o[a] * strides[a] + taps[a].var * dilations[a] for a in range(spatial)]

    if depthwise:
        def body(b: Expr, oc: Expr, *rest: Expr) -> Expr:
            *o, c = rest
            return te.sum(src(b, oc, *at(o), c) * w(oc, 0, *[t.var for t in taps], 0, c), taps)
    else:
        ric, rib = te.reduce_axis(wicb, "ric"), te.reduce_axis(ib, "rib")
        out_blocks_per_group = ocb // group

        def body(b: Expr, oc: Expr, *rest: Expr) -> Expr:
            *o, c = rest
            ic = ric.var if group == 1 else (oc // out_blocks_per_group) * wicb + ric.var
            return te.sum(src(b, ic, *at(o), rib.var) * w(oc, ric.var, *[t.var for t in taps], rib.var, c),
                          [ric, *taps, rib])
    return te.compute((n, ocb, *computed, ob), body, name="conv_nd_nchwc", tag="conv_nd_nchwc", attrs=attrs)


@register_compute("ConvNDNCHWc")
def conv_nd_nchwc_op(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    x, w = require(inputs, 2, "ConvNDNCHWc")
    bias = inputs[2] if len(inputs) > 2 else None
    strides, dilations, pads = conv_nd_window(x.ndim - 3, attrs)
    out = conv_nd_nchwc(x, w, strides, pads, dilations, bool(attrs.get("depthwise")), int(attrs.get("group", 1)))
    shape = out.shape[:-2] + (out.op.attrs["width"],) + out.shape[-1:]
    if out_types and tuple(out_types[0].shape) != shape:
        raise ShapeError(f"ConvNDNCHWc: computed {list(shape)}, the graph says {list(out_types[0].shape)}")
    if bias is not None:
        return [te.compute(shape, lambda b, oc, *rest: out(b, oc, *rest) + bias(oc, rest[-1]),
                           name="conv_nd_nchwc_bias", tag="conv_nd_nchwc_bias")]
    if shape != out.shape:  # widened columns cropped
        return [te.compute(shape, lambda b, oc, *rest: out(b, oc, *rest), name="conv_nd_nchwc_crop",
                           tag="conv_nd_nchwc_bias")]
    return [out]
