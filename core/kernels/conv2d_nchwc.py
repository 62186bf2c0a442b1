"""Conv2dNCHWc: 2-D conv (dense, grouped or depthwise) on NCHW[x]c data with OIHW[x]i[y]o weights
packed at compile time (TVM's conv2d_NCHWc); stages: pad (only when padded), the reduction (tag conv2d_nchwc), bias."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..errors import ShapeError
from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Expr
from .common import attr, require
from .conv2d import conv_out_size
from .registry import register_compute
from .transform import pad

TILE_LOW, TILE_HIGH = 6, 8  # output columns per register tile the compute makes room for
# Dense convs' narrow widths computed wider (a crop follows): 7 columns (the last stage of ImageNet networks)
# leave a tile of one channel block x 7 columns, a broadcast per FMA and fewer accumulators than the FMA
# latency needs; 8 columns take 4 blocks x 2 columns (or 3 x 4). Only where the tile can hold several blocks:
# not grouped convs (a group's blocks only), nor block counts without a divisor 2 or 3 (29: shufflenet's 232
# channels). x86-64-v3, one thread, in-model profiles of mobilenet_v2's and mnasnet's 1x1 convs at 7x7: 4-12%
# faster for the 1/8 more columns.
DENSE_WIDENED = {TILE_HIGH - 1: TILE_HIGH}


def padded_window_input(x: te.Tensor, out_hw: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                        pads: Sequence[int], dilations: Sequence[int], fill: Any, name: str) -> te.Tensor:
    """A blocked input padded (or cropped) to exactly the rows and columns the windows reach. The
    channel block is the vector axis, so strides need no phase split as in NCHW (window.py)."""
    _, _, h, w, _ = x.shape
    need = [(out_hw[a] - 1) * strides[a] + (kernel[a] - 1) * dilations[a] + 1 for a in range(2)]
    top, left = pads[0], pads[1]
    end_h, end_w = need[0] - h - top, need[1] - w - left
    if not (top or left or end_h or end_w):
        return x
    return pad(x, (0, 0, top, left, 0), (0, 0, end_h, end_w, 0), value=fill, name=name, tag=name)


def widened_columns(ow: int) -> int:
    """Output columns the conv computes: the least width >= ow with a divisor in [TILE_LOW, TILE_HIGH],
    so the unrolled register tile divides it (13 -> 14, 55 -> 56, 27 -> 28); a crop stage follows.
    Without it, a prime width gets 1-column tiles (measured 5x slower for 13x13, squeezenet)."""
    if ow <= TILE_HIGH:
        return ow
    width = ow
    while not any(width % t == 0 for t in range(TILE_LOW, TILE_HIGH + 1)):
        width += 1
    return width


def conv2d_nchwc(x: te.Tensor, w: te.Tensor, strides: Sequence[int], pads: Sequence[int],
                 dilations: Sequence[int], depthwise: bool, group: int = 1) -> te.Tensor:
    """out[n, oc, y, x, ob] = sum over (ic, kh, kw, ib) of in[n, g(oc) + ic, y*s+kh*d, x*s+kw*d, ib] *
    w[oc, ic, kh, kw, ib, ob], g(oc) the first input block of oc's group (0 when group = 1);
    depthwise: over (kh, kw) of in[n, oc, ..., ob] * w[oc, 0, kh, kw, 0, ob]."""
    n, icb, h, wd, ib = x.shape
    ocb, wicb, kh, kw, wib, ob = w.shape
    grouped_ok = icb == wicb * group and ocb % group == 0
    if (depthwise and (icb != ocb or ib != ob)) or (not depthwise and (not grouped_ok or ib != wib)):
        raise ShapeError(f"Conv2dNCHWc: input {list(x.shape)} and weights {list(w.shape)} do not agree"
                         + (f" with group={group}" if group > 1 else ""))
    (sh, sw), (dh, dw) = strides, dilations
    oh = conv_out_size(h, kh, sh, pads[0], pads[2], dh)
    ow = conv_out_size(wd, kw, sw, pads[1], pads[3], dw)
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"Conv2dNCHWc: kernel {kh}x{kw} does not fit the padded input {list(x.shape)}")
    several_blocks_per_tile = group == 1 and not depthwise and (ocb % 2 == 0 or ocb % 3 == 0)
    ow_c = DENSE_WIDENED.get(ow, widened_columns(ow)) if several_blocks_per_tile else widened_columns(ow)
    src = padded_window_input(x, (oh, ow_c), (kh, kw), strides, pads, dilations, 0, "conv2d_nchwc_pad")
    rkh, rkw = te.reduce_axis(kh, "rkh"), te.reduce_axis(kw, "rkw")
    attrs = {"strides": (sh, sw), "kernel": (kh, kw), "depthwise": depthwise, "width": ow,
             "pointwise": kh == kw == 1 and not depthwise}
    if group > 1:
        attrs["group"] = group  # only then: dense convs keep their workload keys (tuning records)
    if depthwise:
        def body(b: Expr, o: Expr, y: Expr, xx: Expr, c: Expr) -> Expr:
            return te.sum(src(b, o, y * sh + rkh.var * dh, xx * sw + rkw.var * dw, c) * w(o, 0, rkh.var, rkw.var, 0, c),
                          [rkh, rkw])
    else:
        ric, rib = te.reduce_axis(wicb, "ric"), te.reduce_axis(ib, "rib")
        out_blocks_per_group = ocb // group

        def body(b: Expr, o: Expr, y: Expr, xx: Expr, c: Expr) -> Expr:
            ic = ric.var if group == 1 else (o // out_blocks_per_group) * wicb + ric.var
            return te.sum(src(b, ic, y * sh + rkh.var * dh, xx * sw + rkw.var * dw, rib.var)
                          * w(o, ric.var, rkh.var, rkw.var, rib.var, c), [ric, rkh, rkw, rib])
    return te.compute((n, ocb, oh, ow_c, ob), body, name="conv2d_nchwc", tag="conv2d_nchwc", attrs=attrs)


@register_compute("Conv2dNCHWc")
def conv_nchwc(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    x, w = require(inputs, 2, "Conv2dNCHWc")
    bias = inputs[2] if len(inputs) > 2 else None
    if x.ndim != 5 or w.ndim != 6:
        raise ShapeError(f"Conv2dNCHWc: expects 5-D data and 6-D packed weights, got {list(x.shape)}, {list(w.shape)}")
    out = conv2d_nchwc(x, w, tuple(attr(attrs, "strides", "Conv2dNCHWc", (1, 1))),
                       tuple(attr(attrs, "pads", "Conv2dNCHWc", (0, 0, 0, 0))),
                       tuple(attr(attrs, "dilations", "Conv2dNCHWc", (1, 1))), bool(attrs.get("depthwise")),
                       int(attrs.get("group", 1)))
    shape = out.shape[:3] + (out.op.attrs["width"],) + out.shape[4:]
    if out_types and tuple(out_types[0].shape) != shape:
        raise ShapeError(f"Conv2dNCHWc: computed {list(shape)}, the graph says {list(out_types[0].shape)}")
    if bias is not None:
        return [te.compute(shape, lambda b, o, y, xx, c: out(b, o, y, xx, c) + bias(o, c), name="conv2d_nchwc_bias",
                           tag="conv2d_nchwc_bias")]
    if shape != out.shape:  # widened columns cropped
        return [te.compute(shape, lambda b, o, y, xx, c: out(b, o, y, xx, c), name="conv2d_nchwc_crop",
                           tag="conv2d_nchwc_bias")]
    return [out]
