"""2-D pooling: MaxPool, AveragePool (ONNX ceil_mode and count_include_pad rules) and global pools."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, register_op

from ._common import FLOAT_DTYPES, NUMERIC_DTYPES, expect_arity, expect_dtype
from .windows import output_hw, padded, pads4, pair, windows


def _flag(op: str, attrs: Mapping, key: str) -> int:
    value = attrs.get(key)
    if value not in (0, 1):
        raise ShapeError(f"{op}: attribute {key} must be 0 or 1, got {value!r}")
    return value


def _pool_geometry(op: str, types: Sequence[TensorType], attrs: Mapping, dilated: bool):
    expect_arity(op, types, 1)
    x = types[0]
    if x.rank != 4:
        raise ShapeError(f"{op}: expects a 4-D NCHW input, got {x}")
    kernel, strides, pads = pair(op, attrs, "kernel", 1), pair(op, attrs, "strides", 1), pads4(op, attrs)
    dilations = pair(op, attrs, "dilations", 1) if dilated else (1, 1)
    ceil_mode = _flag(op, attrs, "ceil_mode")
    if any(pads[a] >= kernel[a % 2] for a in range(4)):
        # A window made only of padding has no defined value (ONNX Runtime rejects it too).
        raise ShapeError(f"{op}: pads {pads} must be smaller than the kernel {kernel}")
    out_hw = output_hw(op, x.shape[2:], kernel, strides, pads, dilations, ceil_mode)
    return out_hw, kernel, strides, pads, dilations


def _lowest(dtype: np.dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _max_pool_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    x = inputs[0]
    x_type = TensorType(x.shape, x.dtype.name)
    out_hw, kernel, strides, pads, dilations = _pool_geometry("MaxPool", [x_type], attrs, True)
    xp = padded(x, out_hw, kernel, strides, pads, dilations, _lowest(x.dtype))
    return [np.ascontiguousarray(windows(xp, out_hw, kernel, strides, dilations).max(axis=(-2, -1)))]


@register_op("MaxPool", Pattern.OUT_ELEMWISE_FUSABLE, fold=_max_pool_fold)
def _max_pool(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("MaxPool", types, 1)
    expect_dtype("MaxPool", types[0], NUMERIC_DTYPES)
    out_hw = _pool_geometry("MaxPool", types, attrs, True)[0]
    return [TensorType(types[0].shape[:2] + out_hw, types[0].dtype)]


def _average_pool_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    x = inputs[0]
    out_hw, kernel, strides, pads, _ = _pool_geometry("AveragePool", [TensorType(x.shape, x.dtype.name)], attrs, False)
    ones = (1, 1)
    compute = np.float64
    total = windows(padded(x.astype(compute), out_hw, kernel, strides, pads, ones, 0), out_hw, kernel, strides, ones)
    # The divisor counts the window cells inside the input, or inside input plus declared padding when
    # count_include_pad=1; cells that exist only because of ceil_mode never count.
    h, w = x.shape[2:]
    counted = np.zeros((pads[0] + h + pads[2], pads[1] + w + pads[3]), dtype=compute)
    if attrs.get("count_include_pad"):
        counted[:, :] = 1
    else:
        counted[pads[0]: pads[0] + h, pads[1]: pads[1] + w] = 1
    counted = _extend(counted, out_hw, kernel, strides)
    divisor = windows(counted, out_hw, kernel, strides, ones).sum(axis=(-2, -1))
    return [np.ascontiguousarray(total.sum(axis=(-2, -1)) / divisor).astype(x.dtype)]


def _extend(region: np.ndarray, out_hw, kernel, strides) -> np.ndarray:
    """Zero-extends (or crops) a padded-coordinates mask to the extent the windows need."""
    needed = [(out_hw[a] - 1) * strides[a] + kernel[a] for a in range(2)]
    grown = np.zeros((max(needed[0], region.shape[0]), max(needed[1], region.shape[1])), region.dtype)
    grown[: region.shape[0], : region.shape[1]] = region
    return grown[: needed[0], : needed[1]]


@register_op("AveragePool", Pattern.OUT_ELEMWISE_FUSABLE, fold=_average_pool_fold)
def _average_pool(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("AveragePool", types, 1)
    expect_dtype("AveragePool", types[0], FLOAT_DTYPES)
    _flag("AveragePool", attrs, "count_include_pad")
    out_hw = _pool_geometry("AveragePool", types, attrs, False)[0]
    return [TensorType(types[0].shape[:2] + out_hw, types[0].dtype)]


def _register_global(name: str, reduce) -> None:
    def infer(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
        expect_arity(name, types, 1)
        expect_dtype(name, types[0], FLOAT_DTYPES)
        if types[0].rank != 4:
            raise ShapeError(f"{name}: expects a 4-D NCHW input, got {types[0]}")
        return [TensorType(types[0].shape[:2] + (1, 1), types[0].dtype)]

    def fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
        x = inputs[0]
        return [np.asarray(reduce(x, axis=(2, 3), keepdims=True)).astype(x.dtype, copy=False)]

    register_op(name, Pattern.OUT_ELEMWISE_FUSABLE, fold=fold)(infer)


_register_global("GlobalAveragePool", np.mean)
_register_global("GlobalMaxPool", np.max)
