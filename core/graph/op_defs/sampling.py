"""GridSample: samples (N, C, D1, ..., Dk) input at the normalized points of an (N, O1, ..., Ok, k) grid."""
from __future__ import annotations

from typing import Mapping, Sequence

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, register_op

from ._common import FLOAT_DTYPES, expect_arity, expect_dtype

GRID_SAMPLE_MODES = ("nearest", "linear", "cubic")
GRID_SAMPLE_PADDINGS = ("zeros", "border", "reflection")


@register_op("GridSample", Pattern.INJECTIVE)
def _grid_sample(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("GridSample", types, 2)
    x, grid = types
    expect_dtype("GridSample", x, FLOAT_DTYPES)
    expect_dtype("GridSample", grid, FLOAT_DTYPES, "grid")
    spatial = x.rank - 2
    if spatial not in (2, 3) or grid.rank != x.rank or grid.shape[0] != x.shape[0] or grid.shape[-1] != spatial:
        raise ShapeError(f"GridSample: grid {grid} does not sample a 2-D or 3-D input {x}")
    if attrs.get("mode") not in GRID_SAMPLE_MODES or attrs.get("padding_mode") not in GRID_SAMPLE_PADDINGS:
        raise ShapeError(f"GridSample: unknown mode {attrs.get('mode')!r} or padding {attrs.get('padding_mode')!r}")
    return [TensorType(x.shape[:2] + grid.shape[1:-1], x.dtype)]


@register_op("DeformColumns", Pattern.INJECTIVE)
def _deform_columns(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    """DeformConv's im2col: X [N, C, H, W] sampled (bilinear, zeros outside) at each kernel tap moved by
    offset [N, G*2*kh*kw, oh, ow], times mask [N, G*kh*kw, oh, ow] -> [N, C, kh, kw, oh, ow]."""
    expect_arity("DeformColumns", types, 2, 3)
    x, offset = types[0], types[1]
    expect_dtype("DeformColumns", x, FLOAT_DTYPES)
    kh, kw = attrs.get("kernel") or (0, 0)
    groups = attrs.get("offset_group", 1)
    if x.rank != 4 or offset.rank != 4 or offset.shape[1] != groups * 2 * kh * kw or x.shape[1] % groups:
        raise ShapeError(f"DeformColumns: offset {offset} does not match input {x} and kernel {(kh, kw)}")
    if len(types) == 3 and types[2].shape != (offset.shape[0], groups * kh * kw) + offset.shape[2:]:
        raise ShapeError(f"DeformColumns: mask {types[2]} does not match offset {offset}")
    return [TensorType(x.shape[:2] + (kh, kw) + offset.shape[2:], x.dtype)]


@register_op("RoiAlign", Pattern.OPAQUE)
def _roi_align(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("RoiAlign", types, 3, 4)  # 4th: the map's valid [height, width] at run time (int64)
    x, rois, batch = types[:3]
    if len(types) == 4 and (types[3].shape != (2,) or types[3].dtype != "int64"):
        raise ShapeError(f"RoiAlign: the valid extent {types[3]} must be int64 [2]")
    expect_dtype("RoiAlign", x, FLOAT_DTYPES)
    if x.rank != 4 or rois.rank != 2 or rois.shape[1] != 4 or batch.shape != (rois.shape[0],):
        raise ShapeError(f"RoiAlign: rois {rois} and batch_indices {batch} do not fit input {x}")
    if attrs.get("mode") not in ("avg", "max") or int(attrs.get("sampling_ratio", 0)) < 1:
        raise ShapeError(f"RoiAlign: mode {attrs.get('mode')!r} and sampling_ratio {attrs.get('sampling_ratio')!r}")
    return [TensorType((rois.shape[0], x.shape[1], attrs["output_height"], attrs["output_width"]), x.dtype)]
