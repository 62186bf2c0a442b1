"""The padded input that sliding-window ops (Conv, pooling) read, materialized as its own stage.

Strided windows get the input split into stride phases, P[n, c, ph, pw, i, j] = padded[n, c,
i*sh + ph, j*sw + pw], so that consecutive output columns read consecutive elements (vector loads
instead of gathers); 1x1 strided windows just subsample. Only the rows and columns that windows
reach are materialized.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..te import tensor as te
from ..tir.expr import Expr, logical_and, select
from .common import typed_const
from .transform import pad


class WindowSource:
    """Reads input pixel (y*s + ky*d, x*s + kx*d) of the padded input, whatever its layout."""

    def __init__(self, tensor: te.Tensor, strides: Sequence[int], dilations: Sequence[int], layout: str):
        self.tensor, self.strides, self.dilations, self.layout = tensor, tuple(strides), tuple(dilations), layout

    def read(self, b: Expr, c: Expr, y: Expr, x: Expr, ky: Expr, kx: Expr) -> Expr:
        (sh, sw), (dh, dw) = self.strides, self.dilations
        if self.layout == "dense":
            return self.tensor(b, c, y * sh + ky * dh, x * sw + kx * dw)
        if self.layout == "subsampled":
            return self.tensor(b, c, y, x)
        # Row y*s + k*d lives at phase (k*d) % s, row y + (k*d) // s.
        return self.tensor(b, c, (ky * dh) % sh, (kx * dw) % sw, y + (ky * dh) // sh, x + (kx * dw) // sw)


def window_source(x: te.Tensor, out_hw: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                  pads: Sequence[int], dilations: Sequence[int], fill: Any, name: str) -> WindowSource:
    """The source for windows of `kernel` over NCHW `x` producing `out_hw` outputs; positions outside
    the input read `fill`. The helper stage (if any) is named and tagged `name`."""
    n, c, h, wd = x.shape
    (oh, ow), (kh, kw), (sh, sw), (dh, dw) = out_hw, kernel, strides, dilations
    top, left = pads[0], pads[1]
    need_h, need_w = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
    if sh == sw == 1:
        end_h, end_w = need_h - h - top, need_w - wd - left
        if top or left or end_h > 0 or end_w > 0:
            return WindowSource(pad(x, (0, 0, top, left), (0, 0, end_h, end_w), value=fill, name=name, tag=name),
                                strides, dilations, "dense")
        return WindowSource(x, strides, dilations, "dense")
    fill_value = typed_const(fill, x.dtype)

    def padded(b: Expr, ch: Expr, r: Expr, col: Expr) -> Expr:
        rr, cc = (r - top if top else r), (col - left if left else col)
        inside = logical_and(logical_and(rr >= 0, rr < h), logical_and(cc >= 0, cc < wd))
        return select(inside, x(b, ch, rr, cc), fill_value)

    if kh == kw == 1:
        sub = te.compute((n, c, oh, ow), lambda b, ch, i, j: padded(b, ch, i * sh, j * sw), name=name, tag=name)
        return WindowSource(sub, strides, dilations, "subsampled")
    rows, cols = -(-need_h // sh), -(-need_w // sw)
    phases = te.compute((n, c, sh, sw, rows, cols), lambda b, ch, ph, pw, i, j: padded(b, ch, i * sh + ph, j * sw + pw),
                        name=name, tag=name)
    return WindowSource(phases, strides, dilations, "phases")
