"""GridSample compute (2-D and 3-D): each output element denormalizes its grid point, maps every tap
through the padding mode (zeros, border, reflection) and sums the weighted taps (nearest: 1, linear:
2 per axis, cubic: 4 per axis), as ONNX's reference does; one injective stage."""
from __future__ import annotations

import itertools
from typing import Any, Mapping, Optional, Sequence

from ..errors import ShapeError
from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Expr, call, cast, const, eq, logical_and, maximum, minimum, select
from .common import require
from .registry import register_compute

CUBIC_A = -0.75


def _denormalize(g: Expr, size: int, align_corners: bool) -> Expr:
    if align_corners:
        return (g + 1.0) * ((size - 1) / 2.0)
    return ((g + 1.0) * float(size) - 1.0) * 0.5


def reflect(v: Expr, lo: float, hi: float) -> Expr:
    """Reflect v by the nearer border until it lies in [lo, hi] (ONNX's _gs_reflect)."""
    span = hi - lo
    if span <= 0:
        return const(lo, v.dtype)

    def fold(dx: Expr, near: float, far: float, toward: float) -> Expr:
        n = call("floor", dx / span)
        r = dx - n * span
        even = eq(n - call("floor", n * 0.5) * 2.0, const(0.0, n.dtype))
        return select(even, near + toward * r, far - toward * r)

    below = fold(lo - v, lo, hi, 1.0)
    above = fold(v - hi, hi, lo, -1.0)
    return select(v < lo, below, select(v > hi, above, v))


class _Axis:
    """One spatial axis: where a grid value samples it, and its taps' (clamped index, weight) with the
    padding mode applied (zeros padding: weight 0 outside, the read clamped to stay in bounds)."""

    def __init__(self, size: int, padding: str, align_corners: bool, mode: str):
        self.size, self.padding, self.align, self.mode = size, padding, align_corners, mode
        self.lo, self.hi = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
        self.offsets = {"nearest": (0,), "linear": (0, 1), "cubic": (-1, 0, 1, 2)}[mode]

    def coordinate(self, g: Expr) -> Expr:
        """The sampling coordinate of normalized grid value g, out-of-border points treated."""
        v = _denormalize(g, self.size, self.align)
        if self.mode == "nearest":
            v = call("round", v)  # round half to even, as np.rint
        if self.padding == "border":
            return select(logical_and(v >= self.lo, v <= self.hi), v,
                          minimum(maximum(v, const(0.0, v.dtype)), const(self.size - 1.0, v.dtype)))
        if self.padding == "reflection":
            return reflect(v, self.lo, self.hi)
        return v

    def _first(self, v: Expr) -> Expr:
        return call("trunc", v) if self.mode == "nearest" else call("floor", v)

    def index(self, v: Expr, k: Expr) -> Expr:
        """Input index of tap k (0-based) of coordinate v, clamped into the axis."""
        i = self._first(v) + cast(v.dtype, k + self.offsets[0])
        if self.padding == "reflection":
            i = reflect(i, self.lo, self.hi)
        last = const(self.size - 1, "int64")
        return minimum(maximum(cast("int64", i), const(0, "int64")), last)  # int64 cast truncates, as int()

    def weight(self, v: Expr, k: Expr) -> Expr:
        """Weight of tap k of coordinate v (0 for a zeros-padded tap outside the axis)."""
        first = self._first(v)
        i = first + cast(v.dtype, k + self.offsets[0])
        one = const(1.0, v.dtype)
        if self.mode == "nearest":
            w = one
        else:
            d = call("abs", v - i)  # distance of the tap from the coordinate
            if self.mode == "linear":
                w = one - d
            else:
                a = CUBIC_A
                near = ((a + 2) * d - (a + 3)) * d * d + 1.0
                far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
                w = select(d <= 1.0, near, far)
        if self.padding == "zeros":
            w = select(logical_and(i >= 0.0, i <= self.size - 1.0), w, const(0.0, v.dtype))
        return w


@register_compute("GridSample")
def grid_sample(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    x, grid = require(inputs, 2, "GridSample")
    spatial = x.ndim - 2
    mode, padding = attrs.get("mode", "linear"), attrs.get("padding_mode", "zeros")
    align = bool(attrs.get("align_corners", 0))
    if grid.ndim != x.ndim or grid.shape[-1] != spatial or mode not in ("nearest", "linear", "cubic"):
        raise ShapeError(f"GridSample: grid {list(grid.shape)} does not sample {list(x.shape)} (mode {mode})")
    acc = "float64" if x.dtype == "float64" else "float32"
    points = grid.shape[:-1]  # (N, O1, ..., Ok)
    # Per axis, once per grid point (not per channel): its coordinate, then its taps' indices and weights.
    indices, weights = [], []
    for a in range(spatial):
        axis = _Axis(x.shape[2 + a], padding, align, mode)
        component = const(spatial - 1 - a, "int64")  # the grid lists x (the last axis) first
        coord = te.compute(points, lambda *p, axis=axis, component=component:
                           axis.coordinate(cast(acc, grid(*p, component))), name=f"grid_coord{a}", tag="grid_taps")
        # Tap-major [taps, N, O...]: neighbouring outputs read neighbouring entries (vector loads).
        taps = (len(axis.offsets),) + points
        indices.append(te.compute(taps, lambda k, *p, axis=axis, coord=coord: axis.index(coord(*p), k),
                                  name=f"grid_index{a}", tag="grid_taps"))
        weights.append(te.compute(taps, lambda k, *p, axis=axis, coord=coord: axis.weight(coord(*p), k),
                                  name=f"grid_weight{a}", tag="grid_taps"))
    tap_counts = [t.shape[0] for t in indices]

    def body(n: Expr, c: Expr, *o: Expr) -> Expr:
        total: Optional[Expr] = None
        for combo in itertools.product(*(range(t) for t in tap_counts)):
            at = [indices[a](const(k, "int64"), n, *o) for a, k in enumerate(combo)]
            value = cast(acc, x(n, c, *at))
            if mode != "nearest" or padding == "zeros":
                for a, k in enumerate(combo):
                    value = value * weights[a](const(k, "int64"), n, *o)
            total = value if total is None else total + value
        return cast(x.dtype, total)

    shape = x.shape[:2] + grid.shape[1:-1]
    return [te.compute(shape, body, name="grid_sample", tag="injective")]
