"""MatMul with numpy semantics: C[..., i, j] = sum_k A[..., i, k] * B[..., k, j], batch dims broadcast."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..errors import ShapeError
from ..graph.ir import TensorType
from ..packing.panels import PANEL, TILE_ROWS, worth_packing
from ..te import tensor as te
from ..tir.expr import Expr, const
from .broadcast import broadcast_shape
from .common import require
from .matmul_packed import pack_panels, packed_matmul
from .registry import register_compute


def matmul(a: te.Tensor, b: te.Tensor, packed_columns: Optional[int] = None, may_pack: bool = True,
           panel: int = PANEL, tile_rows: int = TILE_ROWS) -> te.Tensor:
    """`packed_columns`: b is already packed (a constant weight, [..., N/nr, K, nr]) for N columns;
    `may_pack=False` keeps B as it is (GPU schedules tile the plain product in shared memory);
    `panel` x `tile_rows`: the target's micro-kernel (packing.panels.micro_tile, set by pack_matmul_weights)."""
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError("MatMul: inputs must have rank >= 1")
    a_vec, b_vec = a.ndim == 1, b.ndim == 1
    a_shape = (1,) + a.shape if a_vec else a.shape
    b_shape = b.shape + (1,) if b_vec else b.shape
    if packed_columns is not None:  # the logical [..., K, N] of the panels
        b_shape = b.shape[:-3] + (b.shape[-2], packed_columns)
    m, k = a_shape[-2:]
    k2, n = b_shape[-2:]
    if k != k2:
        raise ShapeError(f"MatMul: inner dimensions differ: {list(a.shape)} @ {list(b.shape)}")
    batch = broadcast_shape("MatMul", a_shape[:-2], b_shape[:-2])
    nb = len(batch)
    rk = te.reduce_axis(k, "rk")
    zero = const(0, "int64")

    def operand_batch(shape: Sequence[int], bi: Sequence[Expr]) -> list[Expr]:
        off = nb - (len(shape) - 2)
        return [zero if d == 1 else bi[off + q] for q, d in enumerate(shape[:-2])]

    if packed_columns is not None:
        return packed_matmul(a, b, packed_columns, batch, operand_batch, tile_rows)
    if may_pack and not (a_vec or b_vec) and worth_packing(m, n, k, a.dtype):
        return packed_matmul(a, pack_panels(b, panel), n, batch, operand_batch, tile_rows)

    def body(*idx: Expr) -> Expr:
        bi, i, j = idx[:nb], idx[nb], idx[nb + 1]
        lhs = a(*operand_batch(a_shape, bi), rk.var) if a_vec else a(*operand_batch(a_shape, bi), i, rk.var)
        rhs = b(*operand_batch(b_shape, bi), rk.var) if b_vec else b(*operand_batch(b_shape, bi), rk.var, j)
        return te.sum(lhs * rhs, rk)

    out = te.compute(batch + (m, n), body, name="matmul", tag="matmul")
    if not (a_vec or b_vec):
        return out
    shape = batch + ((() if a_vec else (m,)) + (() if b_vec else (n,)))

    def squeeze(*idx: Expr) -> Expr:
        bi, rest = list(idx[:nb]), list(idx[nb:])
        i = zero if a_vec else rest.pop(0)
        j = zero if b_vec else rest.pop(0)
        return out(*bi, i, j)

    return te.compute(shape, squeeze, name="matmul_squeeze", tag="injective")


@register_compute("MatMul")
def matmul_op(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    a, b = require(inputs, 2, "MatMul")
    return [matmul(a, b, attrs.get("packed_columns"), panel=attrs.get("panel", PANEL),
                   tile_rows=attrs.get("tile_rows", TILE_ROWS))]
