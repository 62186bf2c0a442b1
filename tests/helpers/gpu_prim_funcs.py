"""Small GPU-scheduled kernels for tests: TVM's cooperative shared-memory matmul and an elementwise
kernel on a 1-D grid, lowered to PrimFuncs (run on a GPU, or serially on the CPU)."""
from __future__ import annotations

from typing import Callable

from core.tir.expr import Expr
from core.tir.stmt import PrimFunc
from core.te import tensor as te
from core.te.lower import lower
from core.te.schedule import create_schedule


def tiled_matmul(m: int, n: int, k: int, tile: int = 16, k_tile: int = 16, name: str = "") -> PrimFunc:
    """C = A @ B: a (tile x tile) thread block per output tile, A's and B's k-slices fetched into
    shared memory by all threads of the block together (TVM's cooperative fetching)."""
    a = te.placeholder((m, k), "float32", "A")
    b = te.placeholder((k, n), "float32", "B")
    r = te.reduce_axis(k, "k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), "C")
    s = create_schedule(c)
    a_shared, b_shared = s.cache_read(a, "shared", [c]), s.cache_read(b, "shared", [c])
    c_local = s.cache_write(c, "local")
    i, j = s[c].op.axis
    bi, ti = s[c].split(i, tile)
    bj, tj = s[c].split(j, tile)
    s[c].reorder(bi, bj, ti, tj)
    for axis, tag in ((bi, "blockIdx.y"), (bj, "blockIdx.x"), (ti, "threadIdx.y"), (tj, "threadIdx.x")):
        s[c].bind(axis, tag)
    s[c_local].compute_at(s[c], tj)
    ko, ki = s[c_local].split(s[c_local].reduce_axis[0], k_tile)
    s[c_local].reorder(ko, ki, *s[c_local].op.axis)
    for fetched in (a_shared, b_shared):
        s[fetched].compute_at(s[c_local], ko)
        ty, tx = s[fetched].split(s[fetched].fuse(*s[fetched].op.axis), tile)
        s[fetched].bind(ty, "threadIdx.y")
        s[fetched].bind(tx, "threadIdx.x")
    return lower(s, [a, b, c], name or f"mm_{m}_{n}_{k}")


def elementwise_on_grid(fn: Callable[[Expr], Expr], name: str, dtype: str = "float32", n: int = 1000,
                       threads: int = 128) -> PrimFunc:
    """y[i] = fn(x[i]) with blocks of `threads` threads (the last block guarded)."""
    x = te.placeholder((n,), dtype, "x")
    y = te.compute((n,), lambda i: fn(x[i]), name)
    s = create_schedule(y)
    bx, tx = s[y].split(y.op.axis[0], threads)
    s[y].bind(bx, "blockIdx.x")
    s[y].bind(tx, "threadIdx.x")
    return lower(s, [x, y], name)
