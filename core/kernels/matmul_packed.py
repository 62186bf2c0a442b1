"""MatMul over packed weights: B laid out as panels [..., N/nr, K, nr] so that the micro-kernel
streams each panel contiguously, and the output padded to whole register tiles (then cropped)."""
from __future__ import annotations

from ..packing.panels import PANEL, TILE_ROWS, pad_to
from ..te import tensor as te
from ..tir.expr import Expr, const, minimum, select

# micro-kernel rows -> measured speed per computed row relative to the preferred height, by that height
# (packing.panels.micro_tile). 6 x 16 on znver3 (AVX2), one thread, packed B: 4 and 5 rows keep 8-10
# accumulators, enough to hide the FMA latency; 3 rows do not. So M = 32 (a short sequence) runs 8 x 4
# rows rather than 6 x 6 rows with 4 of them padding. 8 x 32 on znver5 (AVX-512), one thread, 120 x 384 x
# 1536: 5 to 8 rows within 4%, 4 rows 16% and 3 rows 30% slower.
ROW_CHOICES = {6: {6: 1.0, 5: 0.99, 4: 0.98, 3: 0.78},
               8: {8: 1.0, 7: 0.98, 6: 0.99, 5: 0.96, 4: 0.84, 3: 0.70}}


def micro_rows(m: int, preferred: int = TILE_ROWS) -> int:
    """Rows of the micro-kernel: the best speed per useful row once M is padded to a multiple."""
    speed = ROW_CHOICES[preferred]
    best = max(speed, key=lambda r: (m / (-(-m // r) * r)) * speed[r])
    if best < m:
        return best
    # A single tile of several rows: with a fused epilogue LLVM cannot tell its unrolled rows' output
    # addresses apart and keeps their accumulators in memory (a loop over two or more tiles keeps them in
    # registers). Short products (a GEMV, decoder steps of a few rows) are bound by streaming B anyway, so
    # they run whole tiles of the largest proper divisor of M. Measured (znver3, one thread, 768 x 3072 +
    # bias): 2 rows 1.5 -> 1.0-1.2 ms, 3 rows 1.85 -> 1.5 ms, 4 rows 1.98 -> 1.4 ms.
    return max((d for d in range(1, m) if m % d == 0), default=1)


def pack_panels(b: te.Tensor, panel: int = PANEL) -> te.Tensor:
    """B [..., K, N] -> [..., ceil(N / panel), K, panel], zero beyond column N (as packing.panels.pack_weights)."""
    *batch, k, n = b.shape
    panels = -(-n // panel)

    def body(*idx: Expr) -> Expr:
        *bi, p, kk, c = idx
        col = p * panel + c
        if panels * panel == n:
            return b(*bi, kk, col)
        return select(col < n, b(*bi, kk, minimum(col, n - 1)), const(0, b.dtype))

    return te.compute(tuple(batch) + (panels, k, panel), body, name="matmul_pack", tag="matmul_pack")


def packed_matmul(a: te.Tensor, pb: te.Tensor, n: int, batch: tuple[int, ...],
                  operand_batch, tile_rows: int = TILE_ROWS) -> te.Tensor:
    """C[..., i, j] = sum_k A[..., i, k] * PB[..., j / nr, k, j % nr] over M and N padded to whole
    micro-tiles (A's padding rows read its last row, computed and never stored), cropped to M x N.
    `operand_batch(shape, batch indices)` maps output batch indices to an operand's own; `tile_rows` is
    the target's preferred micro-kernel height (micro_rows picks the height for M)."""
    m, k = a.shape[-2:]
    *_, panels, _, panel = pb.shape
    mr = micro_rows(m, tile_rows)
    m_pad, n_pad = pad_to(m, mr), panels * panel
    rk = te.reduce_axis(k, "rk")
    nb = len(batch)

    def body(*idx: Expr) -> Expr:
        bi, i, j = idx[:nb], idx[nb], idx[nb + 1]
        row = i if m_pad == m else minimum(i, m - 1)
        lhs = a(*operand_batch(a.shape, bi), row, rk.var)
        rhs = pb(*operand_batch(pb.shape[:-3] + (1, 1), bi), j // panel, rk.var, j % panel)
        return te.sum(lhs * rhs, rk)

    attrs = {"panel": panel, "rows": mr, "packed": True}
    out = te.compute(batch + (m_pad, n_pad), body, name="matmul", tag="matmul", attrs=attrs)
    if (m_pad, n_pad) == (m, n):
        return out
    return te.compute(batch + (m, n), lambda *idx: out(*idx), name="matmul_crop", tag="matmul_crop")

