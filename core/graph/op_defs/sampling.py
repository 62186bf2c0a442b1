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
