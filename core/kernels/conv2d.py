"""Conv (2-D, NCHW input, OIHW weights, groups, strides, dilations, explicit pads): pad stage, conv, bias.

The padded input is its own stage (see window.py) so the FMA loop reads a dense buffer with no
bounds checks; a bias becomes an elementwise stage after the reduction (a reduction's init must be
a constant), which also crops the extra columns of odd-width outputs.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..errors import ShapeError
from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Expr
from .common import attr, require
from .registry import register_compute
from .window import window_source


WIDTH_UNIT = 8  # conv output rows are computed in multiples of this many columns (when wider than it)


def conv_out_size(size: int, kernel: int, stride: int, pad_lo: int, pad_hi: int, dilation: int) -> int:
    return (size + pad_lo + pad_hi - dilation * (kernel - 1) - 1) // stride + 1


def conv2d_nchw(x: te.Tensor, w: te.Tensor, strides: Sequence[int] = (1, 1), pads: Sequence[int] = (0, 0, 0, 0),
                dilations: Sequence[int] = (1, 1), group: int = 1) -> te.Tensor:
    """The conv reduction (no bias). Stages: `conv2d_pad` (only when padded) and `conv2d` (tag conv2d)."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    if c != cg * group or m % group:
        raise ShapeError(f"Conv: input {list(x.shape)} and weights {list(w.shape)} do not agree with group={group}")
    sh, sw = strides
    dh, dw = dilations
    top, left, bottom, right = pads
    oh = conv_out_size(h, kh, sh, top, bottom, dh)
    ow = conv_out_size(wd, kw, sw, left, right, dw)
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"Conv: kernel {kh}x{kw} does not fit the padded input {list(x.shape)}")
    # Odd output widths (28, 14, 55, 13...) make odd vector lengths, which LLVM splits badly; the conv
    # computes a few extra columns (reading zeros) instead, rounded to WIDTH_UNIT, and a later stage crops.
    ow_c = ow if ow % WIDTH_UNIT == 0 or ow <= WIDTH_UNIT else -(-ow // WIDTH_UNIT) * WIDTH_UNIT
    src = window_source(x, (oh, ow_c), (kh, kw), strides, pads, dilations, 0, "conv2d_pad")
    mg = m // group
    rc = te.reduce_axis(cg, "rc")
    rkh = te.reduce_axis(kh, "rkh")
    rkw = te.reduce_axis(kw, "rkw")

    def body(b: Expr, o: Expr, y: Expr, xx: Expr) -> Expr:
        ic = rc.var if group == 1 else (o // mg) * cg + rc.var
        return te.sum(src.read(b, ic, y, xx, rkh.var, rkw.var) * w(o, rc.var, rkh.var, rkw.var), [rc, rkh, rkw])

    attrs = {"strides": (sh, sw), "dilations": (dh, dw), "group": group, "kernel": (kh, kw),
             "depthwise": group > 1 and cg == 1, "width": ow}
    return te.compute((n, m, oh, ow_c), body, name="conv2d", tag="conv2d", attrs=attrs)


@register_compute("Conv")
def conv(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    x, w = require(inputs, 2, "Conv")
    bias = inputs[2] if len(inputs) > 2 else None
    if x.ndim != 4 or w.ndim != 4:
        raise ShapeError(f"Conv: only 2-D convolution (4-D NCHW input) is supported, got {list(x.shape)}")
    out = conv2d_nchw(x, w, tuple(attr(attrs, "strides", "Conv", (1, 1))), tuple(attr(attrs, "pads", "Conv", (0, 0, 0, 0))),
                      tuple(attr(attrs, "dilations", "Conv", (1, 1))), int(attr(attrs, "group", "Conv", 1)))
    shape = out.shape[:3] + (out.op.attrs["width"],)
    if out_types and tuple(out_types[0].shape) != shape:
        raise ShapeError(f"Conv: computed output {list(shape)} differs from the graph's {list(out_types[0].shape)}")
    if bias is not None:
        return [te.compute(shape, lambda b, o, y, xx: out(b, o, y, xx) + bias(o), name="conv2d_bias", tag="conv2d_bias")]
    if shape != out.shape:
        return [te.compute(shape, lambda b, o, y, xx: out(b, o, y, xx), name="conv2d_crop", tag="conv2d_bias")]
    return [out]
