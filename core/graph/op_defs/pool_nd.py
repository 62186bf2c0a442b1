"""PoolND: max, average and Lp pooling over any number of trailing spatial axes (N, C, D1, ..., Dk),
with dilations everywhere; the 2-D MaxPool/AveragePool ops keep their tuned kernels, this op covers
3-D pooling, dilated averages and LpPool."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, register_op

from ._common import FLOAT_DTYPES, NUMERIC_DTYPES, expect_arity, expect_dtype
from .windows import output_size

POOL_MODES = ("max", "avg", "lp")


def pool_nd_geometry(x_shape: Sequence[int], attrs: Mapping) -> tuple[tuple[int, ...], dict]:
    """(output spatial sizes, normalized window attributes) of a PoolND over `x_shape`."""
    spatial = len(x_shape) - 2
    kernel = tuple(attrs.get("kernel") or ())
    strides = tuple(attrs.get("strides") or (1,) * spatial)
    dilations = tuple(attrs.get("dilations") or (1,) * spatial)
    pads = tuple(attrs.get("pads") or (0,) * (2 * spatial))
    if spatial < 1 or len(kernel) != spatial or len(strides) != spatial or len(dilations) != spatial \
            or len(pads) != 2 * spatial:
        raise ShapeError(f"PoolND: kernel {kernel}, strides {strides}, dilations {dilations} and pads {pads} "
                         f"do not match a {spatial}-D input {list(x_shape)}")
    if attrs.get("mode") not in POOL_MODES:
        raise ShapeError(f"PoolND: mode must be one of {POOL_MODES}, got {attrs.get('mode')!r}")
    ceil_mode = int(attrs.get("ceil_mode", 0))
    out = tuple(output_size("PoolND", x_shape[2 + a], kernel[a], strides[a], pads[a], pads[spatial + a], dilations[a],
                            ceil_mode) for a in range(spatial))
    window = {"kernel": kernel, "strides": strides, "dilations": dilations, "pads": pads}
    return out, window


def pool_nd_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    """Reference loop over output positions (constant folding of small tensors only)."""
    x = inputs[0]
    out, w = pool_nd_geometry(x.shape, attrs)
    spatial, mode = len(out), attrs["mode"]
    p = float(attrs.get("p", 2))
    y = np.zeros(x.shape[:2] + out, np.float64)
    for pos in np.ndindex(*out):
        starts = [pos[a] * w["strides"][a] - w["pads"][a] for a in range(spatial)]
        coords = [np.arange(w["kernel"][a]) * w["dilations"][a] + starts[a] for a in range(spatial)]
        valid = [c[(c >= 0) & (c < x.shape[2 + a])] for a, c in enumerate(coords)]
        patch = x[(slice(None), slice(None)) + np.ix_(*valid)].reshape(x.shape[:2] + (-1,)).astype(np.float64)
        if mode == "max":
            y[(slice(None), slice(None)) + pos] = patch.max(axis=-1)
        elif mode == "lp":
            y[(slice(None), slice(None)) + pos] = (np.abs(patch) ** p).sum(axis=-1) ** (1 / p)
        else:
            if attrs.get("count_include_pad"):
                lo = [-w["pads"][a] for a in range(spatial)]
                hi = [x.shape[2 + a] + w["pads"][spatial + a] for a in range(spatial)]
                count = np.prod([((coords[a] >= lo[a]) & (coords[a] < hi[a])).sum() for a in range(spatial)])
            else:
                count = patch.shape[-1]
            y[(slice(None), slice(None)) + pos] = patch.sum(axis=-1) / count
    return [y.astype(x.dtype)]


@register_op("PoolND", Pattern.REDUCTION, fold=pool_nd_fold)
def _pool_nd(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("PoolND", types, 1)
    x = types[0]
    expect_dtype("PoolND", x, NUMERIC_DTYPES if attrs.get("mode") == "max" else FLOAT_DTYPES)
    if x.rank < 3:
        raise ShapeError(f"PoolND: expects an (N, C, D1, ...) input, got {x}")
    out, _ = pool_nd_geometry(x.shape, attrs)
    return [TensorType(x.shape[:2] + out, x.dtype)]


@register_op("MaxPoolWithIndices", Pattern.OPAQUE)
def _max_pool_with_indices(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    (values,) = _pool_nd(types, dict(attrs, mode="max"))
    if attrs.get("storage_order") and types[0].rank != 4:
        raise ShapeError("MaxPoolWithIndices: storage_order=1 is defined for 2-D pooling only")
    return [values, TensorType(values.shape, "int64")]
