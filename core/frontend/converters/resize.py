"""Resize and Upsample: output sizes and per-axis interpolation tables are resolved at import time
(scales/sizes/roi constants) or computed at run time (resize_runtime.py: an input with run-time extents,
sizes from a run-time Shape), and the IR op Interpolate gathers and weights the taps."""
from __future__ import annotations

import numpy as np

from .registry import ConvertContext, converter
from .resize_runtime import needs_run_time_tables, resize_at_run_time
from .resize_tables import COEFFS, COORDINATE_MODES, AxisTable, axis_table

_POLICIES = ("stretch", "not_larger", "not_smaller")


def _float_input(ctx: ConvertContext, index: int, what: str) -> np.ndarray | None:
    if not ctx.has_input(index):
        return None
    value = ctx.constant(index, what).astype(np.float64).reshape(-1)
    return value if value.size else None


def _given_input(ctx: ConvertContext, index: int) -> str | None:
    """The value of an optional input, None when absent or an empty constant (ONNX's "not given")."""
    if not ctx.has_input(index):
        return None
    constant = ctx.builder.constant_value(ctx.input(index))
    return None if constant is not None and constant.size == 0 else ctx.input(index)


def _output_geometry(ctx: ConvertContext, shape: tuple[int, ...], axes: list[int], scales, sizes,
                     policy: str) -> tuple[list[float], list[int]]:
    """Per-axis scale and output size over all axes (untouched axes: 1.0 and their size)."""
    rank = len(shape)
    scale_all, size_all = [1.0] * rank, list(shape)
    if scales is not None:
        if sizes is not None:
            ctx.fail("only one of scales and sizes may be given")
        if len(scales) != len(axes):
            ctx.fail(f"scales {scales.tolist()} need one value per resized axis {axes}")
        for a, s in zip(axes, scales):
            if s <= 0:
                ctx.fail(f"scales must be positive, got {scales.tolist()}")
            scale_all[a], size_all[a] = float(s), int(s * shape[a])
        return scale_all, size_all
    if sizes is None:
        ctx.fail("one of scales and sizes must be given")
    if len(sizes) != len(axes):
        ctx.fail(f"sizes {sizes.astype(np.int64).tolist()} need one value per resized axis {axes}")
    ratios = [float(n) / shape[a] for a, n in zip(axes, sizes)]
    if policy == "stretch":
        for a, n, r in zip(axes, sizes, ratios):
            scale_all[a], size_all[a] = r, int(n)
        return scale_all, size_all
    common = min(ratios) if policy == "not_larger" else max(ratios)
    for a in axes:
        scale_all[a], size_all[a] = common, int(common * shape[a] + 0.5)
    return scale_all, size_all


def interpolate(ctx: ConvertContext, x: str, scales, sizes, attrs: dict, axes: list[int] | None = None,
                roi: np.ndarray | None = None, policy: str = "stretch") -> str:
    shape = ctx.builder.type_of(x).shape
    dtype = ctx.builder.type_of(x).dtype
    rank = len(shape)
    axes = list(range(rank)) if axes is None else axes
    scale_all, size_all = _output_geometry(ctx, shape, axes, scales, sizes, policy)
    roi_all = [(0.0, 1.0)] * rank
    if roi is not None and attrs["coordinate_transformation_mode"] == "tf_crop_and_resize":
        if len(roi) != 2 * len(axes):
            ctx.fail(f"roi {roi.tolist()} needs a start and an end per resized axis {axes}")
        for i, a in enumerate(axes):
            roi_all[a] = (float(roi[i]), float(roi[len(axes) + i]))
    if attrs["mode"] != "nearest" and not dtype.startswith("float"):
        ctx.unsupported(f"{attrs['mode']} resize of {dtype} data (only nearest resizes integers)")
    resized, tables = [], []
    for a in sorted(set(axes)):
        untouched = np.isclose(scale_all[a], 1.0) and size_all[a] == shape[a] and roi_all[a] == (0.0, 1.0)
        if untouched:
            continue
        if size_all[a] <= 0:
            ctx.fail(f"axis {a} would resize to {size_all[a]} elements")
        tables.append(axis_table(shape[a], size_all[a], scale_all[a], roi_all[a], attrs))
        resized.append(a)
    if not resized:
        return ctx.emit1("Identity", [x])
    if int(np.prod([t.indices.shape[1] for t in tables])) > MAX_FUSED_TAPS:
        # Many taps (antialiased downsampling): one pass per axis costs the sum of the taps, not their product.
        for a, table in zip(resized, tables):
            x = _emit_interpolate(ctx, x, [a], [table], dtype, attrs)
        return x
    return _emit_interpolate(ctx, x, resized, tables, dtype, attrs)


MAX_FUSED_TAPS = 64  # taps per output element beyond which the axes are resampled one at a time


def _emit_interpolate(ctx: ConvertContext, x: str, axes: list[int], tables: list[AxisTable], dtype: str,
                      attrs: dict) -> str:
    weighted = tables[0].weights is not None
    masked = any(t.inside is not None for t in tables)
    inputs = [x]
    for t in tables:
        inputs.append(ctx.const(np.ascontiguousarray(t.indices.T.astype(np.int32))))  # tap-major, see Interpolate
        if weighted:
            inputs.append(ctx.const(np.ascontiguousarray(t.weights.T), "float64" if dtype == "float64" else "float32"))
    if masked:
        for t in tables:
            inputs.append(ctx.const(t.inside if t.inside is not None else np.ones(t.indices.shape[0], bool)))
    return ctx.emit1("Interpolate", inputs, axes=tuple(axes), weighted=int(weighted), masked=int(masked),
                     extrapolation_value=float(attrs.get("extrapolation_value", 0.0)))


def _resize_attrs(ctx: ConvertContext) -> dict:
    attrs = {
        "mode": ctx.attr("mode", "nearest"),
        "nearest_mode": ctx.attr("nearest_mode", "round_prefer_floor"),
        "coordinate_transformation_mode": ctx.attr("coordinate_transformation_mode", "half_pixel"),
        "cubic_coeff_a": float(ctx.attr("cubic_coeff_a", -0.75)),
        "exclude_outside": bool(ctx.attr("exclude_outside", 0)),
        "extrapolation_value": float(ctx.attr("extrapolation_value", 0.0)),
        "antialias": bool(ctx.attr("antialias", 0)),
    }
    if attrs["mode"] not in COEFFS:
        ctx.fail(f"unknown mode {attrs['mode']!r}")
    if attrs["coordinate_transformation_mode"] not in COORDINATE_MODES:
        ctx.unsupported(f"Resize coordinate_transformation_mode {attrs['coordinate_transformation_mode']!r}")
    if attrs["nearest_mode"] not in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
        ctx.fail(f"unknown nearest_mode {attrs['nearest_mode']!r}")
    if attrs["antialias"] and attrs["mode"] == "nearest":
        attrs["antialias"] = False  # ONNX: antialias only affects linear and cubic
    return attrs


@converter("Resize", since_version=11)
def resize(ctx: ConvertContext) -> str:
    attrs = _resize_attrs(ctx)
    rank = ctx.type_of(0).rank
    axes = ctx.attr("axes")
    axes = None if axes is None else [ctx.axis(a, rank, "axes") for a in axes]
    if axes is not None and len(set(axes)) != len(axes):
        ctx.fail(f"axes {axes} repeat an axis")
    policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
    if policy not in _POLICIES:
        ctx.fail(f"unknown keep_aspect_ratio_policy {policy!r}")
    scales_in, sizes_in = (_given_input(ctx, i) for i in (2, 3))
    if needs_run_time_tables(ctx, ctx.input(0), sizes_in, scales_in):
        return resize_at_run_time(ctx, ctx.input(0), scales_in, sizes_in, attrs, axes, policy)
    roi = _float_input(ctx, 1, "roi")
    scales = _float_input(ctx, 2, "scales")
    sizes = _float_input(ctx, 3, "sizes")
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize" and roi is None:
        ctx.fail("tf_crop_and_resize needs a roi")
    return interpolate(ctx, ctx.input(0), scales, sizes, attrs, axes, roi, policy)


def _legacy(ctx: ConvertContext, scales: np.ndarray) -> str:
    """Resize-10 and Upsample: asymmetric coordinates; nearest rounds down when upsampling (Upsample's
    repeat) and up when downsampling, as ONNX Runtime does."""
    mode = ctx.attr("mode", "nearest")
    if mode == "bilinear":
        mode = "linear"
    if mode not in ("nearest", "linear"):
        ctx.fail(f"unknown mode {mode!r}")
    attrs = {"mode": mode, "nearest_mode": "legacy", "coordinate_transformation_mode": "asymmetric",
             "cubic_coeff_a": -0.75, "exclude_outside": False, "antialias": False}
    return interpolate(ctx, ctx.input(0), scales, None, attrs)


@converter("Resize", since_version=10)
def resize_10(ctx: ConvertContext) -> str:
    return _legacy(ctx, ctx.constant(1, "scales").astype(np.float64).reshape(-1))


@converter("Upsample", since_version=7)
def upsample_7(ctx: ConvertContext) -> str:
    return _legacy(ctx, np.asarray(ctx.attr("scales", ()), dtype=np.float64))


@converter("Upsample", since_version=9)
def upsample(ctx: ConvertContext) -> str:
    return _legacy(ctx, ctx.constant(1, "scales").astype(np.float64).reshape(-1))
