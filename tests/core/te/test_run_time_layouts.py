"""Kernel arguments laid out at a run-time length: addressed at the caller's compact layout, 0 read past it, nothing
stored past it; a nest that cannot address them so refuses."""
from __future__ import annotations

import tempfile

import numpy as np
import pytest

from core.codegen.kernel_library import load_kernels
from core.target import get_target
from core.te import tensor as te
from core.te.lower import RunTimeLayoutError, lower
from core.te.schedule import create_schedule
from core.tir.expr import binop, select
from tests.backend_calls import build_library

BATCH, ROWS, COLS = 3, 20, 8  # the compiled shape: ROWS is the bucket's size of the run-time length
SENTINEL = -7.0


def _shifted_rows_kernel():
    """out[b, t, d] = a[b, t + 1, d] * 2 + a[b, t, d], both laid out at len[0] rows (the last row reads past it)."""
    a = te.placeholder((BATCH, ROWS, COLS), "float32", "a")
    length = te.placeholder((1,), "int64", "len")
    out = te.compute((BATCH, ROWS, COLS), lambda b, t, d: select(
        binop("lt", t + 1, ROWS), a[b, t + 1, d], 0.0) * 2.0 + a[b, t, d], name="out")
    sch = create_schedule([out])
    b, t, d = out.op.axis
    sch[out].vectorize(d)
    sch.run_time_layouts = {id(a.op): {1: length(0)}, id(out.op): {1: length(0)}}
    return lower(sch, [a, length, out], "shifted_rows")


@pytest.fixture(scope="module")
def shifted_rows():
    func = _shifted_rows_kernel()
    with tempfile.TemporaryDirectory() as tmp:
        return load_kernels(build_library([func], get_target("x86-64-v3"), f"{tmp}/layouts.so"))


@pytest.mark.parametrize("rows", [0, 1, 7, ROWS - 1, ROWS])
def test_arguments_laid_out_at_the_length_are_read_and_written_compact(shifted_rows, rows):
    rng = np.random.default_rng(rows)
    compact = rng.standard_normal((BATCH, rows, COLS)).astype(np.float32)
    a = np.full(BATCH * ROWS * COLS, np.nan, np.float32)  # the compiled size; the caller's array is its prefix
    a[:compact.size] = compact.reshape(-1)
    out = np.full(BATCH * ROWS * COLS, SENTINEL, np.float32)
    shifted_rows.call("shifted_rows", a, np.array([rows], np.int64), out)
    following = np.concatenate([compact[:, 1:], np.zeros((BATCH, min(rows, 1), COLS), np.float32)], axis=1)
    np.testing.assert_allclose(out[:compact.size].reshape(compact.shape), following * 2.0 + compact, rtol=1e-6)
    assert (out[compact.size:] == SENTINEL).all()  # the caller's array ends at the length: nothing past it


def test_a_reduction_into_an_argument_laid_out_at_a_length_refuses():
    a = te.placeholder((ROWS, COLS), "float32", "a")
    length = te.placeholder((1,), "int64", "len")
    k = te.reduce_axis(COLS, "k")
    sums = te.compute((ROWS,), lambda i: te.sum(a[i, k], k), name="sums")
    sch = create_schedule([sums])
    sch.run_time_layouts = {id(sums.op): {0: length(0)}}
    with pytest.raises(RunTimeLayoutError, match="a reduction accumulates in it"):
        lower(sch, [a, length, sums], "sums")
    sch.run_time_layouts = {id(a.op): {0: length(0)}}  # read at the layout: fine
    assert lower(sch, [a, length, sums], "sums").name == "sums"


def test_a_store_along_a_vectorized_laid_out_axis_refuses():
    a = te.placeholder((ROWS, COLS), "float32", "a")
    length = te.placeholder((1,), "int64", "len")
    out = te.compute((ROWS, COLS), lambda i, j: a[i, j] + 1.0, name="out")
    sch = create_schedule([out])
    sch[out].vectorize(out.op.axis[1])
    sch.run_time_layouts = {id(out.op): {1: length(0)}}
    with pytest.raises(RunTimeLayoutError, match="vector loop"):
        lower(sch, [a, length, out], "columns")


def test_without_layouts_a_kernel_addresses_its_arguments_at_their_static_shapes():
    a = te.placeholder((BATCH, ROWS, COLS), "float32", "a")
    out = te.compute((BATCH, ROWS, COLS), lambda b, t, d: a[b, t, d] * 2.0, name="out")
    plain = lower(create_schedule([out]), [a, out], "plain")
    sch = create_schedule([out])
    sch.run_time_layouts = {}
    assert str(lower(sch, [a, out], "plain")) == str(plain)
    assert "min" not in str(plain.body) and "select" not in str(plain.body).lower()
