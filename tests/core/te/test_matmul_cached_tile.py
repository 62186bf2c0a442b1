"""cache_write in a real template: a MatMul whose row tile does not divide M (a dtype that is not
packed) accumulates each tile in a local buffer, written back once; results stay exact."""
from __future__ import annotations

import tempfile

import numpy as np
import pytest

from tests.backend_calls import build_library, runs_on_host
from core.codegen.kernel_library import load_kernels
from core.kernels.registry import get_compute
from core.kernels.schedules.epilogue import schedule_epilogue
from core.kernels.schedules.matmul import schedule_matmul
from tests.helpers.kernel_runs import OpKernel, build_kernels
from core.target import get_target
from core.te import tensor as te
from core.te.lower import lower
from core.te.schedule import create_schedule
from core.tir.functor import walk_stmt
from core.tir.stmt import Allocate, For, ForKind, IfThenElse, Store

NATIVE = get_target("native")


def _kernel(name, shape_a, shape_b, dtype, rng):
    a = (rng.standard_normal(shape_a) * 8).astype(dtype)
    b = (rng.standard_normal(shape_b) * 8).astype(dtype)
    return OpKernel(name, "MatMul", [a, b])


# The row tile follows the vector width, so each target gets products whose row tile does not divide M:
# (7, 64) x (64, 40) in float64 is one 7-row tile of one 512-bit vector (no guarded row, nothing to
# cache), so x86-64-v4 takes 80 columns (two vectors, 6-row tiles) instead.
GUARDED_PRODUCTS = {
    "x86-64-v3": [("mm_i32", (13, 200), (200, 96), "int32"), ("mm_f64", (7, 64), (64, 40), "float64"),
                  ("mm_f64_batch", (3, 14, 33), (3, 33, 20), "float64")],
    "x86-64-v4": [("mm_i32", (13, 200), (200, 96), "int32"), ("mm_f64", (7, 64), (64, 80), "float64"),
                  ("mm_f64_batch", (3, 14, 33), (3, 33, 20), "float64")],
}


@pytest.mark.parametrize("target_name", list(GUARDED_PRODUCTS))
def test_guarded_rows_accumulate_in_a_local_tile(target_name):
    target = get_target(target_name)
    rng = np.random.default_rng(0)
    kernels = [_kernel(*case, rng) for case in GUARDED_PRODUCTS[target_name]]
    for kernel in kernels:  # the case holds: the row tile leaves a remainder, so some rows are guarded
        assert any(isinstance(s, IfThenElse) for s in walk_stmt(kernel.lower(target).body)), kernel.name
    if runs_on_host(target):  # the structure below is checked on any host
        runs = build_kernels(kernels, target)
        for threads in (1, 2):
            runs[0].lib.set_num_threads(threads)
            for run in runs:
                a, b = run.kernel.inputs
                np.testing.assert_allclose(run.run()[0], a @ b, rtol=1e-12)
    for kernel in kernels:
        allocs = [s for s in walk_stmt(kernel.func.body) if isinstance(s, Allocate)]
        assert [s.buffer.name for s in allocs] == ["matmul.local"] * len(allocs) and allocs
        # The output is written once per element (the write-back), from no reduce loop.
        stores = [s for s in walk_stmt(kernel.func.body) if isinstance(s, Store) and s.buffer.name == "matmul"]
        assert stores
        for loop in walk_stmt(kernel.func.body):
            if isinstance(loop, For) and loop.var.name.startswith("rk"):
                assert not any(isinstance(s, Store) and s.buffer.name == "matmul" for s in walk_stmt(loop))
    # Inside tiles are a second, unguarded copy of the accumulation: its vector loop has no guard.
    vector_loops = [s for s in walk_stmt(kernels[0].func.body) if isinstance(s, For) and s.kind is ForKind.VECTORIZED]
    assert any(not any(isinstance(x, IfThenElse) for x in walk_stmt(loop.body)) for loop in vector_loops)


@pytest.mark.parametrize("m,k,n", [(13, 40, 24), (7, 9, 5)])
def test_cached_tile_with_an_epilogue(m, k, n):
    # The epilogue cannot run inside a reduction's tile any more (the tile is the local stage's), so
    # it gets its own pass; the result is the same.
    a, bm = te.placeholder((m, k), "int32", "a"), te.placeholder((k, n), "int32", "b")
    bias = te.placeholder((n,), "int32", "bias")
    (mm,) = get_compute("MatMul")([a, bm], {}, [])
    out = te.compute(mm.shape, lambda i, j: mm(i, j) + bias(j), name="add")
    sch = create_schedule([out])
    schedule_matmul(sch, [out], NATIVE)
    schedule_epilogue(sch, [out], NATIVE)
    func = lower(sch, [a, bm, bias, out], f"k_mm_epi_{m}")
    rng = np.random.default_rng(m)
    arrays = [rng.integers(-50, 50, t.shape).astype(np.int32) for t in (a, bm, bias)]
    with tempfile.TemporaryDirectory() as tmp:
        lib = load_kernels(build_library([func], NATIVE, f"{tmp}/k.so"))
    got = np.zeros(out.shape, np.int32)
    lib.call(func.name, *arrays, got, *[np.zeros(b.shape, b.dtype) for b in func.workspaces])
    np.testing.assert_array_equal(got, arrays[0] @ arrays[1] + arrays[2])
