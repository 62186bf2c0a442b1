"""Conv (2-D, NCHW input, OIHW weights, groups, strides, dilations, explicit pads): pad stage, conv, bias.

The padded input is its own stage (see window.py) so the FMA loop reads a dense buffer with no
bounds checks; a bias becomes an elementwise stage after the reduction (a reduction's init must be
a constant), which also crops the extra columns of odd-width outputs (rows are computed in whole
vectors) and reshapes pointwise convs computed over the flattened image.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..errors import ShapeError
from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Expr, const, logical_and, select
from .common import attr, require
from .registry import register_compute
from .window import window_source


WIDTH_UNIT = 8  # conv output rows are computed in multiples of this many columns (when wider than it)
PIXEL_UNIT = 16  # 1x1 convs compute the flattened image in multiples of this many pixels (two AVX2 vectors)


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
    mg = m // group
    rc = te.reduce_axis(cg, "rc")
    attrs = {"strides": (sh, sw), "pads": tuple(pads), "dilations": (dh, dw), "group": group, "kernel": (kh, kw),
             "depthwise": group > 1 and cg == 1, "width": ow, "flat": False, "pointwise": False}
    if kh == kw == 1 and group == 1:
        # A 1x1 conv is a matrix product over the pixels: it reads the image as one contiguous run.
        attrs["pointwise"] = True
        if (oh * ow) % PIXEL_UNIT or sh != 1 or sw != 1 or any(pads):
            return _pointwise_flat(x, w, rc, (oh, ow), attrs)
    # Odd output widths (28, 14, 55, 13...) make odd vector lengths, which LLVM splits badly; the conv
    # computes a few extra columns (reading zeros) instead, rounded to WIDTH_UNIT, and a later stage crops.
    ow_c = ow if ow % WIDTH_UNIT == 0 or ow <= WIDTH_UNIT // 2 else -(-ow // WIDTH_UNIT) * WIDTH_UNIT
    src = window_source(x, (oh, ow_c), (kh, kw), strides, pads, dilations, 0, "conv2d_pad")
    rkh = te.reduce_axis(kh, "rkh")
    rkw = te.reduce_axis(kw, "rkw")

    def body(b: Expr, o: Expr, y: Expr, xx: Expr) -> Expr:
        ic = rc.var if group == 1 else (o // mg) * cg + rc.var
        return te.sum(src.read(b, ic, y, xx, rkh.var, rkw.var) * w(o, rc.var, rkh.var, rkw.var), [rc, rkh, rkw])

    return te.compute((n, m, oh, ow_c), body, name="conv2d", tag="conv2d", attrs=attrs)


def _pointwise_flat(x: te.Tensor, w: te.Tensor, rc: te.IterVar, out_hw: Sequence[int], attrs: dict) -> te.Tensor:
    """A 1x1 conv over a flattened copy of the pixels it reads (subsampled and padded as strides and
    pads say), rounded up to PIXEL_UNIT with zeros: 13x13 computes 176 pixels instead of 13 rows of
    16, a stride-2 7x7 output 64 instead of 7 rows of 8. Output shape (n, m, 1, P)."""
    n, c, h, wd = x.shape
    m = w.shape[0]
    (oh, ow), (sh, sw) = out_hw, attrs["strides"]
    top, left = attrs["pads"][:2]
    count = oh * ow
    pixels = count if count <= PIXEL_UNIT // 2 else -(-count // PIXEL_UNIT) * PIXEL_UNIT

    def flat(b: Expr, ch: Expr, _: Expr, p: Expr) -> Expr:
        row, col = (p // ow) * sh - top, (p % ow) * sw - left
        inside = p < count
        if top:
            inside = logical_and(inside, logical_and(row >= 0, row < h))
        if left:
            inside = logical_and(inside, logical_and(col >= 0, col < wd))
        return select(inside, x(b, ch, row, col), const(0, x.dtype))

    src = te.compute((n, c, 1, pixels), flat, name="conv2d_pad", tag="conv2d_pad")
    attrs = dict(attrs, flat=True, pixels=count)
    return te.compute((n, m, 1, pixels), lambda b, o, y, p: te.sum(src(b, rc.var, 0, p) * w(o, rc.var, 0, 0), [rc]),
                      name="conv2d", tag="conv2d", attrs=attrs)


def read_conv(out: te.Tensor, b: Expr, o: Expr, y: Expr, xx: Expr) -> Expr:
    """Output pixel (b, o, y, xx) of a conv stage, whatever layout it was computed in."""
    if out.op.attrs.get("flat"):
        return out(b, o, 0 * y, y * out.op.attrs["width"] + xx)
    return out(b, o, y, xx)


@register_compute("Conv")
def conv(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    x, w = require(inputs, 2, "Conv")
    bias = inputs[2] if len(inputs) > 2 else None
    if x.ndim != 4 or w.ndim != 4:
        raise ShapeError(f"Conv: only 2-D convolution (4-D NCHW input) is supported, got {list(x.shape)}")
    out = conv2d_nchw(x, w, tuple(attr(attrs, "strides", "Conv", (1, 1))), tuple(attr(attrs, "pads", "Conv", (0, 0, 0, 0))),
                      tuple(attr(attrs, "dilations", "Conv", (1, 1))), int(attr(attrs, "group", "Conv", 1)))
    shape = conv_output_shape(out)
    if out_types and tuple(out_types[0].shape) != shape:
        raise ShapeError(f"Conv: computed output {list(shape)} differs from the graph's {list(out_types[0].shape)}")
    if bias is not None:
        return [te.compute(shape, lambda b, o, y, xx: read_conv(out, b, o, y, xx) + bias(o), name="conv2d_bias",
                           tag="conv2d_bias")]
    if shape != out.shape:
        return [te.compute(shape, lambda b, o, y, xx: read_conv(out, b, o, y, xx), name="conv2d_crop",
                           tag="conv2d_bias")]
    return [out]


def flat_point_map(op: te.ComputeOp):
    """For a conv stage computed over the flattened image, the map from its point (b, o, 0, p) to
    the NCHW output pixel read_conv reads it as: (b, o, p // width, p % width), while p is a real
    pixel (not the padding up to a whole tile). None for a stage in NCHW already."""
    if not op.attrs.get("flat"):
        return None
    width, count = op.attrs["width"], op.attrs["pixels"]

    def point(at):
        b, o, _, p = at
        return (b, o, p // width, p % width), (p < count if count < op.shape[3] else None)

    return point


def conv_output_shape(out: te.Tensor) -> tuple[int, ...]:
    """The NCHW shape of the conv a (possibly widened or flattened) conv stage computes."""
    n, m = out.shape[:2]
    width = out.op.attrs["width"]
    if out.op.attrs.get("flat"):
        pixels = out.op.attrs["pixels"]
        return (n, m, pixels // width, width)
    return (n, m, out.shape[2], width)
