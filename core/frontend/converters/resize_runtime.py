"""Resize whose input extents or output sizes are known only at run time: the per-axis tables are graph ops.

An image whose height and width are run-time lengths (core/graph/bounded.py), or sizes computed from a
Shape at run time (a feature pyramid's upsample to a lateral's size), get their index and weight tables
computed from those lengths by ordinary elementwise ops, the same formulas as resize_tables.axis_table
(ONNX's coordinate_transformation_mode, nearest_mode, linear taps), with every index clamped into the
valid input extent: the padding past a bounded input's length is never read, and the output is bounded
by its run-time size along each resized axis."""
from __future__ import annotations

from typing import Optional

import numpy as np

from core.graph.bounded import Bound, arithmetic, combined, parts_of, shape_operand
from core.graph.run_time_entries import entry_sources, extremes, int_length, same_length

from .registry import ConvertContext

_RUN_TIME_MODES = ("align_corners", "asymmetric", "pytorch_half_pixel", "half_pixel", "half_pixel_symmetric")


def needs_run_time_tables(ctx: ConvertContext, x: str, sizes: Optional[str], scales: Optional[str]) -> bool:
    """Whether the resize reads a bounded input or takes sizes/scales computed at run time."""
    b = ctx.builder
    computed = [v for v in (sizes, scales) if v and b.constant_value(v) is None]
    return x in b.bounds or bool(computed)


def resize_at_run_time(ctx: ConvertContext, x: str, scales: Optional[str], sizes: Optional[str], attrs: dict,
                       axes: Optional[list[int]], policy: str) -> str:
    b = ctx.builder
    xtype = b.type_of(x)
    rank = xtype.rank
    axes = list(range(rank)) if axes is None else axes
    if attrs["mode"] not in ("nearest", "linear") or attrs["antialias"]:
        ctx.unsupported(f"{attrs['mode']}{' antialiased' if attrs['antialias'] else ''} resize over run-time "
                        f"sizes (nearest and linear are taken)")
    if attrs["coordinate_transformation_mode"] not in _RUN_TIME_MODES:
        ctx.unsupported(f"coordinate_transformation_mode {attrs['coordinate_transformation_mode']!r} over "
                        f"run-time sizes")
    if policy != "stretch":
        ctx.unsupported(f"keep_aspect_ratio_policy {policy!r} over run-time sizes")
    if scales is not None and sizes is not None:
        ctx.fail("only one of scales and sizes may be given")
    if scales is None and sizes is None:
        ctx.fail("one of scales and sizes must be given")
    if scales is not None and b.constant_value(scales) is None:
        ctx.unsupported("scales computed at run time (sizes computed at run time are taken)")
    in_lengths = {p.axis: p.length for p in parts_of(b.bounds.get(x))}
    sizes_operand = None
    if sizes is not None and b.constant_value(sizes) is None:
        sizes_operand = shape_operand(b, sizes)
        if sizes_operand is None:
            ctx.fail("its sizes are computed at run time in a way whose largest value Kiln cannot tell")
    flat_scales = None if scales is None else b.constant_value(scales).astype(np.float64).reshape(-1)
    count = len(flat_scales) if flat_scales is not None else b.type_of(sizes).numel
    if count != len(axes):
        ctx.fail(f"scales or sizes need one value per resized axis {axes}, got {count}")
    resized, tables, out_parts = [], [], []
    for entry, axis in enumerate(axes):
        in_len = in_lengths.get(axis)
        if flat_scales is not None:
            scale = float(flat_scales[entry])
            if scale <= 0:
                ctx.fail(f"scales must be positive, got {flat_scales.tolist()}")
            largest = int(scale * xtype.shape[axis])
            out_len = None if in_len is None else _scaled_length(ctx, in_len, scale, largest)
            scale_value = _f64(ctx, scale)
        else:
            largest, out_len = _sized_length(ctx, sizes, sizes_operand, entry)
            scale_value = None
        if out_len is not None and out_len == in_len:  # resized to its own run-time length: untouched
            out_parts.append(Bound(out_len, axis))
            continue
        if in_len is None and out_len is None and largest == xtype.shape[axis] and (
                flat_scales is None or np.isclose(flat_scales[entry], 1.0)):
            continue
        if largest <= 0:
            ctx.fail(f"axis {axis} would resize to {largest} elements")
        out_f = _as_f64(ctx, out_len) if out_len is not None else _f64(ctx, largest)
        in_f = _as_f64(ctx, in_len) if in_len is not None else _f64(ctx, xtype.shape[axis])
        if scale_value is None:
            scale_value = arithmetic(b, "Div", out_f, in_f)
        tables.append(_axis_tables(ctx, largest, in_len, xtype.shape[axis], in_f, out_f, scale_value, attrs,
                                   flat_scales[entry] if flat_scales is not None else None, xtype.dtype))
        resized.append(axis)
        if out_len is not None:
            out_parts.append(Bound(out_len, axis))
    out_parts += [Bound(length, axis) for axis, length in in_lengths.items() if axis not in axes]
    if not resized:
        out = b.add_unbounded_node("Identity", [x], 1, ctx.hint)[0]
    else:
        weighted = attrs["mode"] != "nearest"
        inputs = [x] + [t for pair in tables for t in (pair if weighted else pair[:1])]
        (out,) = b.add_unbounded_node("Interpolate", inputs, 1, ctx.hint, axes=tuple(resized), weighted=int(weighted),
                                      masked=0, extrapolation_value=float(attrs.get("extrapolation_value", 0.0)))
    bound = combined(out_parts)
    if bound is not None:
        b.bounds[out] = bound
    return out


def _f64(ctx: ConvertContext, value: float) -> str:
    return ctx.builder.add_constant(np.array([value], np.float64), "resize")


def _as_f64(ctx: ConvertContext, length: str) -> str:
    return ctx.builder.add_unbounded_node("Cast", [length], 1, "resize", to="float64")[0]


def _scaled_length(ctx: ConvertContext, in_len: str, scale: float, largest: int) -> str:
    """floor(length * scale) as an int64 [1] value (what a static resize makes of a constant scale); a whole
    scale as an integer product, which stays a sum of the input lengths (the runtime cuts an output by it)."""
    b = ctx.builder
    if scale == 1.0:
        return in_len
    if float(scale).is_integer():
        length = arithmetic(b, "Mul", in_len, b.add_constant(np.array([int(scale)], np.int64), "length"))
        b.runtime_ints[length] = np.array([largest], np.int64)
        return length
    product = arithmetic(b, "Mul", _as_f64(ctx, in_len), _f64(ctx, scale))
    floored = b.add_unbounded_node("Floor", [product], 1, "length")[0]
    length = b.add_unbounded_node("Cast", [floored], 1, "length", to="int64")[0]
    b.runtime_ints[length] = np.array([largest], np.int64)
    return length


def _sized_length(ctx: ConvertContext, sizes: str, operand, entry: int) -> tuple[int, Optional[str]]:
    """(largest, run-time length or None when static) of one entry of the sizes input."""
    b = ctx.builder
    constant = b.constant_value(sizes)
    if constant is not None:
        return int(constant.reshape(-1)[entry]), None
    largest = int(operand[0][entry])
    sources = entry_sources(b, sizes)
    source = sources[entry] if sources is not None else None
    if isinstance(source, int):
        return source, None
    if source is None:
        flat = b.add_unbounded_node("Reshape", [sizes], 1, "length", shape=(len(operand[0]),))[0]
        source = b.add_unbounded_node("Slice", [flat], 1, "length", starts=(entry,), steps=(1,), sizes=(1,))[0]
    low, high = extremes(b, source)
    if low is not None and low == high:  # the same at every size in range
        return int(high), None
    return largest, int_length(b, same_length(b, source), largest)


def _axis_tables(ctx: ConvertContext, largest: int, in_len: Optional[str], in_static: int, in_f: str, out_f: str,
                 scale: str, attrs: dict, static_scale: Optional[float], dtype: str) -> tuple[str, str]:
    """(index table [taps, largest] int64, weight table [taps, largest]) of one axis (resize_tables.axis_table's
    arithmetic on run-time extents; nearest: one tap and no weights)."""
    b = ctx.builder
    op = lambda name, *args: arithmetic(b, name, *args) if len(args) == 2 else b.add_unbounded_node(  # noqa: E731
        name, list(args), 1, "resize")[0]
    out = b.add_constant(np.arange(largest, dtype=np.float64), "position")
    half = _f64(ctx, 0.5)
    mode = attrs["coordinate_transformation_mode"]
    width = op("Mul", scale, in_f)
    one, zero = _f64(ctx, 1.0), _f64(ctx, 0.0)
    if mode == "asymmetric":
        coords = op("Div", out, scale)
    elif mode == "align_corners":
        stretched = op("Div", op("Mul", out, op("Sub", in_f, one)), op("Sub", width, one))
        coords = op("Where", op("Equal", width, one), zero, stretched)
    else:
        coords = op("Sub", op("Div", op("Add", out, half), scale), half)
        if mode == "pytorch_half_pixel":
            coords = op("Where", op("Equal", width, one), op("Neg", half), coords)
        elif mode == "half_pixel_symmetric":
            offset = op("Mul", op("Div", in_f, _f64(ctx, 2.0)), op("Sub", one, op("Div", out_f, width)))
            coords = op("Add", offset, coords)
    floor = op("Floor", coords)
    integral = op("Equal", coords, floor)
    ratio = op("Where", integral, one, op("Sub", coords, floor))  # (0, 1]: the left neighbour is preferred
    left = op("Where", integral, op("Sub", floor, one), floor)
    last = op("Sub", in_f, one) if in_len is not None else _f64(ctx, in_static - 1)

    def clamped(index: str) -> str:
        inside = op("Min", op("Max", index, zero), last)
        row = b.add_unbounded_node("Cast", [inside], 1, "resize", to="int64")[0]
        return b.add_unbounded_node("Reshape", [row], 1, "resize", shape=(1, largest))[0]

    if attrs["mode"] == "nearest":
        nearest_mode = attrs["nearest_mode"]
        if nearest_mode == "legacy":  # Resize-10 and Upsample: up when downsampling (a constant scale)
            nearest_mode = "ceil" if static_scale is not None and static_scale < 1 else "floor"
        pick = {"round_prefer_floor": lambda: op("Greater", ratio, half),
                "round_prefer_ceil": lambda: op("GreaterOrEqual", ratio, half),
                "floor": lambda: integral, "ceil": lambda: None}[nearest_mode]()
        chosen = op("Add", left, one) if pick is None else op("Where", pick, op("Add", left, one), left)
        return clamped(chosen), ""
    weight_type = "float64" if dtype == "float64" else "float32"
    indices = b.add_unbounded_node("Concat", [clamped(left), clamped(op("Add", left, one))], 1, "resize", axis=0)[0]
    rows = [b.add_unbounded_node("Reshape", [w], 1, "resize", shape=(1, largest))[0]
            for w in (op("Sub", one, ratio), ratio)]
    weights = b.add_unbounded_node("Concat", rows, 1, "resize", axis=0)[0]
    weights = b.add_unbounded_node("Cast", [weights], 1, "resize", to=weight_type)[0]
    return indices, weights


__all__ = ["needs_run_time_tables", "resize_at_run_time"]
