"""Helpers shared by kernel computes: broadcasting index maps, dtype-aware constants, attribute reads."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import numpy as np

from ..errors import ShapeError
from ..te.tensor import Tensor
from ..tir.expr import Expr, const, is_float


def broadcast_read(t: Tensor, out_indices: Sequence[Expr]) -> Expr:
    """Read `t` at the numpy-broadcast position of `out_indices` (size-1 dims read index 0)."""
    offset = len(out_indices) - t.ndim
    if offset < 0:
        raise ShapeError(f"cannot broadcast {t.name}{list(t.shape)} to rank {len(out_indices)}")
    idx = [const(0, "int64") if d == 1 else out_indices[offset + k] for k, d in enumerate(t.shape)]
    return t(*idx)


def require(inputs: Sequence[Optional[Tensor]], count: int, op: str) -> list[Tensor]:
    """The first `count` inputs, which must be present."""
    if len(inputs) < count or any(t is None for t in inputs[:count]):
        raise ShapeError(f"{op}: expects {count} inputs, got {len(inputs)}")
    return list(inputs[:count])  # type: ignore[arg-type]


def attr(attrs: Mapping[str, Any], key: str, op: str, default: Any = ...) -> Any:
    if key in attrs and attrs[key] is not None:
        return attrs[key]
    if default is ...:
        raise ShapeError(f"{op}: missing attribute {key}")
    return default


def typed_const(value: Any, dtype: str) -> Expr:
    """A constant of `dtype`; floats are rounded to the dtype, ints saturate instead of wrapping."""
    if dtype == "bool" or is_float(dtype):
        return const(value, dtype)
    info = np.iinfo(dtype)
    return const(int(min(max(int(value) if np.isfinite(value) else (info.max if value > 0 else info.min),
                              info.min), info.max)), dtype)


def prod(values: Sequence[int]) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out
