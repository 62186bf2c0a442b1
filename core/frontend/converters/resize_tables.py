"""Resize's per-axis interpolation tables, computed at import time: for every output position of a
resized axis, the input indices it reads and their weights (ONNX's separable reference semantics)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np


@dataclass(frozen=True)
class AxisTable:
    indices: np.ndarray  # int64 [out, taps], already clamped into [0, in)
    weights: Optional[np.ndarray]  # float64 [out, taps]; None for nearest (one tap, weight 1)
    inside: Optional[np.ndarray]  # bool [out]; None unless tf_crop_and_resize extrapolates somewhere


CoeffFn = Callable[[float, float], np.ndarray]  # (ratio in (0, 1], scale) -> weights of consecutive taps


def _nearest(nearest_mode: str) -> CoeffFn:
    def coeffs(ratio: float, scale: float) -> np.ndarray:
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        pick_right = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                      "floor": False, "ceil": True}[nearest_mode]
        return np.array([0.0, 1.0]) if pick_right else np.array([1.0, 0.0])

    return coeffs


def _linear(antialias: bool) -> CoeffFn:
    def coeffs(ratio: float, scale: float) -> np.ndarray:
        if not antialias:
            return np.array([1 - ratio, ratio])
        scale = min(scale, 1.0)
        start = int(np.floor(-1 / scale) + 1)
        args = (np.arange(start, 2 - start) - ratio) * scale
        weights = np.clip(1 - np.abs(args), 0, 1)
        return weights / weights.sum()

    return coeffs


def _cubic(antialias: bool, a: float) -> CoeffFn:
    def kernel(x: float) -> float:
        x = abs(x)
        if x <= 1:
            return (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1
        if x < 2:
            return a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a
        return 0.0

    def coeffs(ratio: float, scale: float) -> np.ndarray:
        if not antialias:
            return np.array([kernel(ratio + 1), kernel(ratio), kernel(1 - ratio), kernel(2 - ratio)])
        scale = min(scale, 1.0)
        start = int(np.floor(-2 / scale) + 1)
        weights = np.array([kernel(scale * (i - ratio)) for i in range(start, 2 - start)])
        return weights / weights.sum()

    return coeffs


COEFFS: dict[str, Callable[..., CoeffFn]] = {
    "nearest": lambda attrs: _nearest(attrs["nearest_mode"]),
    "linear": lambda attrs: _linear(attrs["antialias"]),
    "cubic": lambda attrs: _cubic(attrs["antialias"], attrs["cubic_coeff_a"]),
}


def _source_coords(mode: str, out: np.ndarray, scale: float, size_in: int, size_out: int,
                   roi: tuple[float, float]) -> np.ndarray:
    """The input coordinate each output position maps to (ONNX coordinate_transformation_mode)."""
    width = scale * size_in  # the real-valued output width the scale implies
    if mode == "align_corners":
        return np.zeros(size_out) if width == 1 else out * (size_in - 1) / (width - 1)
    if mode == "asymmetric":
        return out / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        if width == 1:
            coords = np.full(size_out, (end - start) * (size_in - 1) / 2)
        else:
            coords = out * (end - start) * (size_in - 1) / (width - 1)
        return coords + start * (size_in - 1)
    if mode == "pytorch_half_pixel":
        return np.full(size_out, -0.5) if width == 1 else (out + 0.5) / scale - 0.5
    if mode == "half_pixel":
        return (out + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = size_in / 2 * (1 - size_out / width)
        return offset + (out + 0.5) / scale - 0.5
    raise ValueError(mode)


COORDINATE_MODES = ("align_corners", "asymmetric", "tf_crop_and_resize", "pytorch_half_pixel", "half_pixel",
                    "half_pixel_symmetric")


def axis_table(size_in: int, size_out: int, scale: float, roi: tuple[float, float], attrs: dict) -> AxisTable:
    """The table of one resized axis; `attrs` holds mode, nearest_mode, antialias, cubic_coeff_a,
    exclude_outside and coordinate_transformation_mode."""
    if attrs.get("nearest_mode") == "legacy":
        # Resize-10 and Upsample (ONNX Runtime's "simple" rounding): down when upsampling, up when downsampling.
        attrs = dict(attrs, nearest_mode="ceil" if scale < 1 else "floor")
    coeff_fn = COEFFS[attrs["mode"]](attrs)
    coords = _source_coords(attrs["coordinate_transformation_mode"], np.arange(size_out, dtype=np.float64), scale,
                            size_in, size_out, roi)
    floor = np.floor(coords)
    ratios = np.where(coords == floor, 1.0, coords - floor)  # (0, 1]: the left neighbour is preferred
    weights = np.stack([coeff_fn(float(r), scale) for r in ratios]) if size_out else np.zeros((0, 2))
    taps = weights.shape[1]
    # The `taps` neighbours nearest to each coordinate, ties going to the smaller index.
    pad = -(-taps // 2)
    shifted = coords + pad
    base = np.floor(shifted)
    frac = shifted - base
    if taps % 2 == 0:
        offset = np.where(frac == 0, -(taps // 2), -(taps // 2) + 1)
    else:
        offset = np.where(frac <= 0.5, -((taps - 1) // 2), -((taps - 1) // 2) + 1)
    indices = (base.astype(np.int64) + offset)[:, None] + np.arange(taps)[None, :] - pad
    if attrs["exclude_outside"]:
        weights = np.where((indices < 0) | (indices >= size_in), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    indices = np.clip(indices, 0, size_in - 1)
    inside = None
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize":
        within = (coords >= 0) & (coords <= size_in - 1)
        inside = None if within.all() else within
    if attrs["mode"] == "nearest":
        # One tap: the neighbour whose weight is 1.
        return AxisTable(np.take_along_axis(indices, weights.argmax(axis=1)[:, None], axis=1), None, inside)
    return AxisTable(indices, weights, inside)
