"""MatMul's packed right operand: B [..., K, N] as panels [..., ceil(N / nr), K, nr], zero beyond column N,
so that the micro-kernel streams each panel contiguously (core/kernels/matmul_packed.py); in numpy."""
from __future__ import annotations

import numpy as np

PANEL = 16  # columns per panel of packed B by default: two AVX2 vectors of float32 (the 6 x 16 micro-kernel)
TILE_ROWS = 6  # the micro-kernel's rows by default
MIN_WORK = 16 ** 3  # multiply-adds below which packing costs more than it saves


def micro_tile(lanes: int, registers: int) -> tuple[int, int]:
    """(panel width, preferred rows) of the packed micro-kernel on a target with `lanes` float32 per
    vector and `registers` vector registers: two vectors of columns, at least PANEL (NEON keeps 4 x 4
    floats), and 8 rows where 32 registers leave room for 16 accumulators. Measured on znver5, one
    thread, 128 x 384 x 1536: 8 x 32 runs 270 GFLOP/s with AVX-512, 6 x 16 (6 zmm accumulators) 126."""
    panel = max(PANEL, 2 * lanes)
    return panel, 8 if registers >= 32 and panel == 2 * lanes else TILE_ROWS


def worth_packing(m: int, n: int, k: int, dtype: str, constant: bool = False) -> bool:
    """Float32 products with one panel of columns and some work (other dtypes keep the plain tile).
    B packed at run time: from a few rows on (the copy reads and writes B, as much as a GEMV's whole
    product). A constant B, packed at compile time for free: from one row on, since a GEMV or a short
    decoder batch is bound by streaming B, and over panels each thread's column tile is one contiguous
    run with its accumulators in registers, where over plain rows it reads a piece of every row."""
    return (dtype == "float32" and m >= (1 if constant else 3) and n >= 8 and k >= 8
            and m * n * k >= MIN_WORK)


def pad_to(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def pack_weights(b: np.ndarray, panel: int = PANEL) -> np.ndarray:
    """B [..., K, N] -> panels [..., ceil(N / panel), K, panel], for constant weights packed at compile
    time (the kernel's own `pack_panels` computes the same at run time)."""
    *batch, k, n = b.shape
    n_pad = pad_to(n, panel)
    padded = np.zeros(tuple(batch) + (k, n_pad), b.dtype)
    padded[..., :n] = b
    out = padded.reshape(tuple(batch) + (k, n_pad // panel, panel))
    return np.ascontiguousarray(np.moveaxis(out, -2, -3))


def unpack_weights(b: np.ndarray, columns: int) -> np.ndarray:
    """The inverse of pack_weights: panels [..., N/nr, K, nr] back to [..., K, N] with N = `columns`."""
    *batch, panels, k, nr = b.shape
    return np.moveaxis(b, -3, -2).reshape(tuple(batch) + (k, panels * nr))[..., :columns]
