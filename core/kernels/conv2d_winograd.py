"""Conv2dWinogradNCHWc: a 3x3 stride-1 conv on NCHW[x]c data by Winograd F(m x m, 3x3), weights
transformed at compile time (core/packing/winograd.py; m from their shape). Stages (tags):
winograd_pad (only when padded), winograd_input (V = B^T d B per (m+2)^2 input tile),
winograd_gemm ((m+2)^2 GEMMs over channels, M = U V) and winograd_output (Y = A^T M A per m x m
output tile, plus the bias).

Tiles are numbered flat, p = tile row * tile columns + tile column, so the GEMM's register tile can
span tiles of several rows; the transforms' constant coefficients become plain adds once their
(unrolled) position loops are constants (select chains LLVM folds).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from ..errors import ShapeError
from ..graph.ir import TensorType
from ..packing.winograd import transforms_for_positions
from ..te import tensor as te
from ..tir.expr import Expr, eq, select
from .common import attr, require
from .conv2d_nchwc import padded_window_input
from .registry import register_compute


def _combination(coeffs: np.ndarray, read: Callable[[int, int], Expr]) -> Expr:
    """sum over (r, s) of coeffs[r, s] * read(r, s), written without the zero terms and unit factors."""
    terms = [(c > 0, read(r, s) if abs(c) == 1 else read(r, s) * float(abs(c)))
             for (r, s), c in np.ndenumerate(coeffs) if c != 0]
    positive, out = terms[0]
    out = out if positive else -out
    for positive, term in terms[1:]:
        out = out + term if positive else out - term
    return out


def _pick(index: Expr, arms: Sequence[Expr]) -> Expr:
    """arms[index] for an index in [0, len(arms)): a select chain."""
    out = arms[-1]
    for k in range(len(arms) - 2, -1, -1):
        out = select(eq(index, k), arms[k], out)
    return out


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


TILE_ROUND = 4  # the GEMM's tile count is padded to a multiple of this, so register tiles split it exactly


def conv2d_winograd_nchwc(x: te.Tensor, u: te.Tensor, bias: Optional[te.Tensor], pads: Sequence[int]) -> te.Tensor:
    n, icb, h, w, ib = x.shape
    positions, ocb, uicb, uib, ob = u.shape
    try:
        t = transforms_for_positions(positions)
    except ValueError as err:
        raise ShapeError(f"Conv2dWinogradNCHWc: {err}") from None
    if (uicb, uib) != (icb, ib):
        raise ShapeError(f"Conv2dWinogradNCHWc: input {list(x.shape)} and weights {list(u.shape)} do not agree")
    oh, ow = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"Conv2dWinogradNCHWc: the 3x3 kernel does not fit the padded input {list(x.shape)}")
    m = t.tile
    th, tw = _ceil_div(oh, m), _ceil_div(ow, m)
    tiles = _ceil_div(th * tw, TILE_ROUND) * TILE_ROUND
    # Rows for every tile, the padding ones too (they read zeros; no output reads their products).
    src = padded_window_input(x, (_ceil_div(tiles, tw) * m, tw * m), (3, 3), (1, 1), pads, (1, 1), 0, "winograd_pad")

    def input_tile(b: Expr, k: Expr, c: Expr, p: Expr, lane: Expr) -> Expr:
        ty, tx = p // tw, p % tw
        arms = [_combination(np.outer(t.B_T[a], t.B_T[bb]), lambda r, s: src(b, c, ty * m + r, tx * m + s, lane))
                for a in range(t.alpha) for bb in range(t.alpha)]
        return _pick(k, arms)

    v = te.compute((n, positions, icb, tiles, ib), input_tile, name="winograd_input", tag="winograd_input",
                   attrs={"tile": m, "tile_columns": tw})
    ric, rib = te.reduce_axis(icb, "ric"), te.reduce_axis(ib, "rib")
    prod = te.compute((n, positions, ocb, tiles, ob),
                      lambda b, k, o, p, c: te.sum(v(b, k, ric.var, p, rib.var) * u(k, o, ric.var, rib.var, c),
                                                   [ric, rib]),
                      name="winograd_gemm", tag="winograd_gemm")

    def output_pixel(b: Expr, o: Expr, y: Expr, xx: Expr, c: Expr) -> Expr:
        p = (y // m) * tw + xx // m
        arms = [_combination(np.outer(t.A_T[i], t.A_T[j]), lambda a, bb: prod(b, a * t.alpha + bb, o, p, c))
                for i in range(m) for j in range(m)]
        out = _pick((y % m) * m + xx % m, arms)
        return out + bias(o, c) if bias is not None else out

    return te.compute((n, ocb, oh, ow, ob), output_pixel, name="winograd_output", tag="winograd_output",
                      attrs={"tile": m})


@register_compute("Conv2dWinogradNCHWc")
def conv_winograd_nchwc(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    x, u = require(inputs, 2, "Conv2dWinogradNCHWc")
    bias = inputs[2] if len(inputs) > 2 else None
    if x.ndim != 5 or u.ndim != 5:
        raise ShapeError(f"Conv2dWinogradNCHWc: expects 5-D data and 5-D transformed weights, got "
                         f"{list(x.shape)}, {list(u.shape)}")
    out = conv2d_winograd_nchwc(x, u, bias, tuple(attr(attrs, "pads", "Conv2dWinogradNCHWc", (0, 0, 0, 0))))
    if out_types and tuple(out_types[0].shape) != out.shape:
        raise ShapeError(f"Conv2dWinogradNCHWc: computed {list(out.shape)}, the graph says {list(out_types[0].shape)}")
    return [out]
