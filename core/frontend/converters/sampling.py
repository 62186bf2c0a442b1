"""GridSample (onto the IR op of that name) and AffineGrid (a constant base grid times theta)."""
from __future__ import annotations

import numpy as np

from .registry import ConvertContext, converter

_MODES_16 = {"bilinear": "linear", "bicubic": "cubic", "nearest": "nearest"}  # opset 16 names -> opset 20 names


@converter("GridSample", since_version=16)
def grid_sample(ctx: ConvertContext) -> str:
    mode = ctx.attr("mode", "linear" if ctx.opset >= 20 else "bilinear")
    mode = _MODES_16.get(mode, mode)
    if mode == "cubic" and ctx.type_of(0).rank != 4:
        ctx.unsupported("GridSample cubic mode on a 3-D (volumetric) input")
    if ctx.type_of(0).rank not in (4, 5):
        ctx.unsupported(f"GridSample of a rank-{ctx.type_of(0).rank} input (2-D and 3-D sampling only)")
    return ctx.emit1("GridSample", [ctx.input(0), ctx.input(1)], mode=mode,
                     padding_mode=ctx.attr("padding_mode", "zeros"), align_corners=int(ctx.attr("align_corners", 0)))


def _base_grid(sizes: list[int], align_corners: bool) -> np.ndarray:
    """[prod(sizes), k + 1] rows (x, y[, z], 1): normalized coordinates, last spatial axis first."""
    axes = []
    for n in sizes:
        if align_corners:
            axes.append(np.linspace(-1.0, 1.0, n) if n > 1 else np.zeros(1))
        else:
            axes.append((np.arange(n) * 2.0 + 1.0) / n - 1.0)
    mesh = np.meshgrid(*axes, indexing="ij")
    points = [m.reshape(-1) for m in reversed(mesh)]
    return np.stack(points + [np.ones_like(points[0])], axis=1)


@converter("AffineGrid", since_version=20)
def affine_grid(ctx: ConvertContext) -> str:
    theta = ctx.type_of(0)  # (N, k, k + 1)
    size = [int(v) for v in ctx.constant(1, "size").reshape(-1)]
    spatial = len(size) - 2
    if spatial not in (2, 3) or theta.shape[1:] != (spatial, spatial + 1) or theta.shape[0] != size[0]:
        ctx.fail(f"theta {theta} does not match size {size}")
    base = ctx.const(_base_grid(size[2:], bool(ctx.attr("align_corners", 0))).T.astype(theta.dtype))  # [k+1, P]
    # (N, k, k+1) @ (k+1, P) -> (N, k, P) -> (N, P, k) -> (N, D1, ..., k)
    points = ctx.emit1("MatMul", [ctx.input(0), base])
    points = ctx.emit1("Transpose", [points], perm=(0, 2, 1))
    return ctx.reshape(points, [size[0]] + size[2:] + [spatial])


@converter("DeformConv", since_version=19)
def deform_conv(ctx: ConvertContext) -> str:
    """Deformed im2col columns (DeformColumns), then one grouped MatMul with the weights and the bias."""
    x, w = ctx.type_of(0), ctx.type_of(1)
    if x.rank != 4:
        ctx.unsupported(f"{x.rank - 2}-D DeformConv (2-D only)")
    n, c = x.shape[:2]
    m, cg, kh, kw = w.shape
    group = int(ctx.attr("group", 1))
    offset_group = int(ctx.attr("offset_group", 1))
    if c != cg * group or m % group or c % offset_group:
        ctx.fail(f"input {x}, weights {w}, group={group} and offset_group={offset_group} do not agree")
    inputs = [ctx.input(0), ctx.input(2)] + ([ctx.input(4)] if ctx.has_input(4) else [])
    strides = tuple(int(v) for v in ctx.attr("strides", [1, 1]))
    dilations = tuple(int(v) for v in ctx.attr("dilations", [1, 1]))
    pads = tuple(int(v) for v in ctx.attr("pads", [0, 0, 0, 0]))
    cols = ctx.emit1("DeformColumns", inputs, kernel=(kh, kw), strides=strides, dilations=dilations, pads=pads,
                     offset_group=offset_group)
    oh, ow = ctx.shape(2)[2:]
    cols = ctx.reshape(cols, [n, group, cg * kh * kw, oh * ow])
    weights = ctx.reshape(ctx.input(1), [group, m // group, cg * kh * kw])
    y = ctx.reshape(ctx.emit1("MatMul", [weights, cols]), [n, m, oh, ow])
    if ctx.has_input(3):
        y = ctx.emit1("Add", [y, ctx.reshape(ctx.input(3), [m, 1, 1])])
    return y


@converter("RoiAlign", since_version=10)
def roi_align(ctx: ConvertContext) -> str:
    ratio = int(ctx.attr("sampling_ratio", 0))
    if ratio < 1:
        ctx.unsupported("RoiAlign with sampling_ratio=0 (its sample count depends on each roi's size at run time)")
    if ctx.type_of(0).rank != 4:
        ctx.fail(f"expects an (N, C, H, W) input, got {ctx.type_of(0)}")
    mode = ctx.attr("mode", "avg")
    transform = ctx.attr("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 16 else "output_half_pixel")
    if mode not in ("avg", "max") or transform not in ("half_pixel", "output_half_pixel"):
        ctx.fail(f"unknown mode {mode!r} or coordinate_transformation_mode {transform!r}")
    return ctx.emit1("RoiAlign", [ctx.input(0), ctx.input(1), ctx.input(2)], mode=mode, sampling_ratio=ratio,
                     output_height=int(ctx.attr("output_height", 1)), output_width=int(ctx.attr("output_width", 1)),
                     spatial_scale=float(ctx.attr("spatial_scale", 1.0)), coordinate_transformation_mode=transform)
