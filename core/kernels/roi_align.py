"""RoiAlign compute: each (roi, channel, bin) averages (or takes the max of) a fixed sampling_ratio x
sampling_ratio grid of bilinear samples, as ONNX's reference and ONNX Runtime do (samples beyond
the feature map by more than a pixel count as zero). An optional fourth input, int64 [2], holds the feature
map's valid height and width at run time (a map with run-time sides, core/graph/bound_rules.py): the edges
clamp and cut there instead of at the buffer's."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Expr, cast, const, logical_or, maximum, minimum, select
from ..tir.index_guard import checked_index
from .common import require
from .registry import register_compute


@register_compute("RoiAlign")
def roi_align(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    x, rois, batch = require(inputs, 3, "RoiAlign")
    extent = inputs[3] if len(inputs) > 3 else None
    _, c, h, w = x.shape
    if extent is not None:
        h, w = extent(const(0, "int64")), extent(const(1, "int64"))
    out_h, out_w = int(attrs["output_height"]), int(attrs["output_width"])
    ratio = int(attrs["sampling_ratio"])
    scale = float(attrs.get("spatial_scale", 1.0))
    half_pixel = attrs.get("coordinate_transformation_mode", "half_pixel") == "half_pixel"
    mode = attrs.get("mode", "avg")
    acc = "float64" if x.dtype == "float64" else "float32"
    i64 = lambda v: const(v, "int64")  # noqa: E731
    riy, rix = te.reduce_axis(ratio, "riy"), te.reduce_axis(ratio, "rix")

    def axis(r: Expr, lo_col: int, hi_col: int, bin_index: Expr, sample: Expr, pooled: int, size: int):
        """(low index, high index, low weight, high weight, outside flag) of one sample along one axis."""
        start = cast(acc, rois(r, i64(lo_col))) * scale - (0.5 if half_pixel else 0.0)
        length = cast(acc, rois(r, i64(hi_col))) * scale - (0.5 if half_pixel else 0.0) - start
        if not half_pixel:
            length = maximum(length, const(1.0, acc))
        step = length / float(pooled)
        v = start + cast(acc, bin_index) * step + (cast(acc, sample) + 0.5) * step / float(ratio)
        last = i64(size - 1) if isinstance(size, int) else size - i64(1)
        outside = logical_or(v < -1.0, v > (float(size) if isinstance(size, int) else cast(acc, size)))
        v = maximum(v, const(0.0, acc))
        low = cast("int64", v)
        edge = low >= last
        low = minimum(low, last)
        high = select(edge, last, low + 1)
        frac = select(edge, const(0.0, acc), v - cast(acc, low))
        return low, high, 1.0 - frac, frac, outside

    def body(r: Expr, ch: Expr, py: Expr, px: Expr) -> Expr:
        b = checked_index(batch(r), x.shape[0])
        yl, yh, wyl, wyh, out_y = axis(r, 1, 3, py, riy.var, out_h, h)
        xl, xh, wxl, wxh, out_x = axis(r, 0, 2, px, rix.var, out_w, w)
        terms = [cast(acc, x(b, ch, yy, xx)) * (wy * wx)
                 for yy, wy in ((yl, wyl), (yh, wyh)) for xx, wx in ((xl, wxl), (xh, wxh))]
        if mode == "max":
            value = maximum(maximum(terms[0], terms[1]), maximum(terms[2], terms[3]))
        else:
            value = terms[0] + terms[1] + terms[2] + terms[3]
        value = select(logical_or(out_y, out_x), const(0.0, acc), value)
        return te.max(value, [riy, rix]) if mode == "max" else te.sum(value, [riy, rix])

    shape = (rois.shape[0], c, out_h, out_w)
    pooled = te.compute(shape, body, name="roi_align_pool", tag="roi_align")
    count = float(max(ratio * ratio, 1))
    return [te.compute(shape, lambda *i: cast(x.dtype, pooled(*i) if mode == "max" else pooled(*i) / count),
                       name="roi_align", tag="roi_align")]
