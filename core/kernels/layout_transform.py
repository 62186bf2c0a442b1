"""LayoutTransform: NCHW <-> NCHW[x]c, NCDHW <-> NCDHW[x]c (and between blocks), an injective gather of channels."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..errors import ShapeError
from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Expr
from .common import require
from .registry import register_compute


def layout_transform(x: te.Tensor, src_block: int, dst_block: int) -> te.Tensor:
    """NCHW (or NCDHW) <-> blocked, or between blocks; the spatial axes pass through."""
    if src_block:
        n, cb, *spatial, _ = x.shape
        channels = cb * src_block
    else:
        n, channels, *spatial = x.shape

    def read(b: Expr, c: Expr, at: Sequence[Expr]) -> Expr:  # plain channel c of the input
        return x(b, c // src_block, *at, c % src_block) if src_block else x(b, c, *at)

    if not dst_block:
        return te.compute((n, channels, *spatial), lambda b, c, *at: read(b, c, at), name="layout_transform",
                          tag="layout_transform")
    if channels % dst_block:
        raise ShapeError(f"LayoutTransform: {channels} channels do not split into blocks of {dst_block}")
    return te.compute((n, channels // dst_block, *spatial, dst_block),
                      lambda b, o, *at: read(b, o * dst_block + at[-1], at[:-1]), name="layout_transform",
                      tag="layout_transform")


@register_compute("LayoutTransform")
def layout_transform_op(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    (x,) = require(inputs, 1, "LayoutTransform")
    return [layout_transform(x, int(attrs.get("src_block", 0)), int(attrs.get("dst_block", 0)))]
