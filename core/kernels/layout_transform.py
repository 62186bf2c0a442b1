"""LayoutTransform: NCHW <-> NCHW[x]c (and between blocks), an injective gather of channels."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..errors import ShapeError
from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Expr
from .common import require
from .registry import register_compute


def layout_transform(x: te.Tensor, src_block: int, dst_block: int) -> te.Tensor:
    if src_block:
        n, cb, h, w, _ = x.shape
        channels = cb * src_block
    else:
        n, channels, h, w = x.shape

    def read(b: Expr, c: Expr, y: Expr, xx: Expr) -> Expr:  # NCHW channel c of the input
        return x(b, c // src_block, y, xx, c % src_block) if src_block else x(b, c, y, xx)

    if not dst_block:
        return te.compute((n, channels, h, w), read, name="layout_transform", tag="layout_transform")
    if channels % dst_block:
        raise ShapeError(f"LayoutTransform: {channels} channels do not split into blocks of {dst_block}")
    return te.compute((n, channels // dst_block, h, w, dst_block),
                      lambda b, o, y, xx, c: read(b, o * dst_block + c, y, xx), name="layout_transform",
                      tag="layout_transform")


@register_compute("LayoutTransform")
def layout_transform_op(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "LayoutTransform")
    return [layout_transform(x, int(attrs.get("src_block", 0)), int(attrs.get("dst_block", 0)))]
