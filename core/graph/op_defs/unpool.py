"""MaxUnpool: scatters pooled values back to the positions their indices name (zeros elsewhere), stated
gather-style: each output element looks at the few pooling windows that cover it."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, register_op

from ._common import INDEX_DTYPES, NUMERIC_DTYPES, expect_arity, expect_dtype


def max_unpool_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    """Scatter into the unpooled shape the pooling implies (indices are flat over it), then pad to output_shape."""
    x, indices = inputs
    spatial = x.ndim - 2
    kernel, strides, pads = attrs["kernel"], attrs["strides"], attrs["pads"]
    natural = x.shape[:2] + tuple((x.shape[2 + a] - 1) * strides[a] - pads[a] - pads[spatial + a] + kernel[a]
                                  for a in range(spatial))
    flat = np.zeros(int(np.prod(natural)), x.dtype)
    flat[indices.reshape(-1)] = x.reshape(-1)
    out = np.zeros(tuple(attrs["output_shape"]), x.dtype)
    region = tuple(slice(0, min(n, o)) for n, o in zip(natural, out.shape))
    out[region] = flat.reshape(natural)[region]
    return [out]


@register_op("MaxUnpool", Pattern.INJECTIVE, fold=max_unpool_fold)
def _max_unpool(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("MaxUnpool", types, 2)
    x, indices = types
    expect_dtype("MaxUnpool", x, NUMERIC_DTYPES)
    expect_dtype("MaxUnpool", indices, INDEX_DTYPES, "indices")
    out = tuple(attrs.get("output_shape") or ())
    spatial = x.rank - 2
    if indices.shape != x.shape or len(out) != x.rank or out[:2] != x.shape[:2] or spatial < 1:
        raise ShapeError(f"MaxUnpool: input {x}, indices {indices} and output shape {out} do not agree")
    for key in ("kernel", "strides"):
        if len(attrs.get(key) or ()) != spatial:
            raise ShapeError(f"MaxUnpool: attribute {key} needs {spatial} values")
    if len(attrs.get("pads") or ()) != 2 * spatial:
        raise ShapeError(f"MaxUnpool: attribute pads needs {2 * spatial} values")
    return [TensorType(out, x.dtype)]
