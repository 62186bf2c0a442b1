"""Stages that stop at a run-time length: loop extents and guards read it, and no work is done past it."""
from __future__ import annotations

import tempfile

import numpy as np
import pytest

from core.codegen.kernel_library import load_kernels
from core.target import get_target
from core.te import tensor as te
from core.te.lower import lower
from core.te.schedule import create_schedule
from core.tir.expr import Load
from core.tir.functor import walk_expr, walk_stmt
from core.tir.stmt import For, ForKind, IfThenElse
from tests.backend_calls import build_library

ROWS, COLS = 37, 24
SENTINEL = -7.0


def _rows_kernel(schedule: str, bounded: bool = True):
    """out[i, j] = (a[i, j] + 1) * 2 through an intermediate stage, rows bounded by len[0]; `schedule`: how
    the rows are looped (split, fused with the columns, parallel)."""
    a = te.placeholder((ROWS, COLS), "float32", "a")
    length = te.placeholder((1,), "int64", "len")
    mid = te.compute((ROWS, COLS), lambda i, j: a[i, j] + 1.0, name="mid")
    out = te.compute((ROWS, COLS), lambda i, j: mid[i, j] * 2.0, name="out")
    sch = create_schedule([out])
    for stage_of in (mid, out):
        i, j = stage_of.op.axis
        if schedule == "split":
            io, ii = sch[stage_of].split(i, 8)
            jo, ji = sch[stage_of].split(j, 8)
            sch[stage_of].reorder(io, jo, ii, ji)
            sch[stage_of].vectorize(ji)
        elif schedule == "fused":
            sch[stage_of].parallel(sch[stage_of].fuse(i, j))
        elif schedule == "parallel":
            sch[stage_of].parallel(i)
    if bounded:
        sch[out].run_time_bounds = {0: length(0)}
    return lower(sch, [a, length, out], f"rows_{schedule}"), sch


def _row_sums_kernel():
    """A stage read across the bounded axis (column sums over every row) must keep all its rows."""
    a = te.placeholder((ROWS, COLS), "float32", "a")
    length = te.placeholder((1,), "int64", "len")
    mid = te.compute((ROWS, COLS), lambda i, j: a[i, j] * 3.0, name="mid")
    k = te.reduce_axis(ROWS, "k")
    sums = te.compute((COLS,), lambda j: te.sum(mid[k, j], k), name="sums")
    total = te.compute((ROWS, COLS), lambda i, j: sums[j] + mid[i, j], name="total")
    sch = create_schedule([total])
    sch[total].run_time_bounds = {0: length(0)}
    return lower(sch, [a, length, total], "row_sums")


def _reads_length(expr, length_buffer) -> bool:
    return any(isinstance(e, Load) and e.buffer is length_buffer for e in walk_expr(expr))


@pytest.fixture(scope="module")
def kernels():
    funcs = [_rows_kernel(s)[0] for s in ("split", "fused", "parallel")] + [_row_sums_kernel()]
    target = get_target("x86-64-v3")
    with tempfile.TemporaryDirectory() as tmp:
        lib = load_kernels(build_library(funcs, target, f"{tmp}/bounds.so"))
    return {f.name: f for f in funcs}, lib


def test_a_split_axis_takes_the_length_as_its_outer_loop_extent():
    func, _ = _rows_kernel("split")
    length = func.inputs[1]
    bounded = [s for s in walk_stmt(func.body) if isinstance(s, For) and _reads_length(s.extent, length)]
    # both stages (out, and mid that out reads at its own rows) run their row tiles to ceil(len / 8)
    assert len(bounded) == 2 and all(str(s.extent) == f"min(5, (({length.name}[0] + 7) // 8))" for s in bounded)
    assert all(s.kind is ForKind.SERIAL for s in bounded)


def test_a_fused_loop_whose_outer_part_is_bounded_ends_at_the_length_times_the_inner_extent():
    func, _ = _rows_kernel("fused")
    length = func.inputs[1]
    loops = [s for s in walk_stmt(func.body) if isinstance(s, For)]
    # no idle iterations left for the parallel loop's threads past the length
    assert len(loops) == 2 and all(s.kind is ForKind.PARALLEL and
                                   str(s.extent) == f"min({ROWS * COLS}, ({length.name}[0] * {COLS}))" for s in loops)
    assert not any(isinstance(s, IfThenElse) for s in walk_stmt(func.body))


def test_a_fused_loop_whose_inner_part_is_bounded_skips_its_iterations_past_the_length():
    a = te.placeholder((ROWS, COLS), "float32", "a")
    length = te.placeholder((1,), "int64", "len")
    out = te.compute((ROWS, COLS), lambda i, j: a[i, j] * 2.0, name="out")
    sch = create_schedule([out])
    sch[out].parallel(sch[out].fuse(*out.op.axis))
    sch[out].run_time_bounds = {1: length(0)}  # the columns: fused % COLS
    func = lower(sch, [a, length, out], "columns_fused")
    (loop,) = [s for s in walk_stmt(func.body) if isinstance(s, For)]
    assert str(loop.extent) == str(ROWS * COLS) and isinstance(loop.body, IfThenElse)
    assert _reads_length(loop.body.cond, func.inputs[1])
    with tempfile.TemporaryDirectory() as tmp:
        lib = load_kernels(build_library([func], get_target("x86-64-v3"), f"{tmp}/columns.so"))
    a_value = np.random.default_rng(8).standard_normal((ROWS, COLS)).astype(np.float32)
    out_value = np.full((ROWS, COLS), SENTINEL, np.float32)
    lib.call("columns_fused", a_value, np.array([9], np.int64), out_value)
    np.testing.assert_allclose(out_value[:, :9], a_value[:, :9] * 2.0, rtol=1e-6)
    assert (out_value[:, 9:] == SENTINEL).all()


@pytest.mark.parametrize("name", ["rows_split", "rows_fused", "rows_parallel"])
@pytest.mark.parametrize("rows", [0, 1, 9, 16, 30, ROWS])
def test_rows_before_the_length_are_computed_and_none_past_it(kernels, name, rows):
    funcs, lib = kernels
    a = np.random.default_rng(rows).standard_normal((ROWS, COLS)).astype(np.float32)
    out = np.full((ROWS, COLS), SENTINEL, np.float32)
    workspaces = [np.full(b.shape, np.nan, b.dtype) for b in funcs[name].workspaces]
    lib.call(name, a, np.array([rows], np.int64), out, *workspaces)
    np.testing.assert_allclose(out[:rows], (a[:rows] + 1.0) * 2.0, rtol=1e-6)
    if name == "rows_split":  # whole tiles of 8 rows: the tile holding the length is computed, none after it
        done = min(ROWS, -(-rows // 8) * 8)
    else:
        done = rows
    assert (out[done:] == SENTINEL).all()


def test_a_stage_read_across_the_bounded_axis_keeps_every_row(kernels):
    funcs, lib = kernels
    func = funcs["row_sums"]
    assert not any(isinstance(s, For) and _reads_length(s.extent, func.inputs[1]) and "mid" in str(s.body)
                   and "total" not in str(s.body) for s in walk_stmt(func.body))
    a = np.random.default_rng(3).standard_normal((ROWS, COLS)).astype(np.float32)
    out = np.full((ROWS, COLS), SENTINEL, np.float32)
    workspaces = [np.full(b.shape, np.nan, b.dtype) for b in func.workspaces]
    lib.call("row_sums", a, np.array([10], np.int64), out, *workspaces)
    mid = a * 3.0
    np.testing.assert_allclose(out[:10], mid.sum(0) + mid[:10], rtol=1e-5, atol=1e-5)
    assert (out[10:] == SENTINEL).all()


def test_a_producer_read_at_the_skipped_point_divided_stops_at_the_length_divided_too():
    """out[i, j] = panels[i // 4, j] + a[i, j] with out's rows bounded by len: panels (one row per 4 rows, as
    packed columns of a product) stop at ceil(len / 4)."""
    a = te.placeholder((ROWS, COLS), "float32", "a")
    length = te.placeholder((1,), "int64", "len")
    panels = te.compute(((ROWS + 3) // 4, COLS), lambda p, j: a[p * 4, j] * 2.0, name="panels")
    out = te.compute((ROWS, COLS), lambda i, j: panels[i // 4, j] + a[i, j], name="out")
    sch = create_schedule([out])
    sch[out].run_time_bounds = {0: length(0)}
    func = lower(sch, [a, length, out], "panels")
    (panel_rows,) = [s for s in walk_stmt(func.body) if isinstance(s, For) and _reads_length(s.extent, func.inputs[1])
                     and "panels" in str(s.body) and "out" not in str(s.body)]
    assert str(panel_rows.extent) == f"min({(ROWS + 3) // 4}, (({func.inputs[1].name}[0] + 3) // 4))"
    with tempfile.TemporaryDirectory() as tmp:
        lib = load_kernels(build_library([func], get_target("x86-64-v3"), f"{tmp}/panels.so"))
    a_value = np.random.default_rng(7).standard_normal((ROWS, COLS)).astype(np.float32)
    for rows in (0, 1, 4, 9, ROWS):
        out_value = np.full((ROWS, COLS), SENTINEL, np.float32)
        (space,) = [np.full(b.shape, np.nan, b.dtype) for b in func.workspaces]
        lib.call("panels", a_value, np.array([rows], np.int64), out_value, space)
        expected = a_value[(np.arange(ROWS) // 4) * 4] * 2.0 + a_value
        np.testing.assert_allclose(out_value[:rows], expected[:rows], rtol=1e-6)
        assert np.isnan(space[-(-rows // 4):]).all() and not np.isnan(space[:-(-rows // 4)]).any()


@pytest.mark.parametrize("schedule", ["split", "fused", "parallel"])
def test_without_bounds_the_kernel_never_reads_the_length(schedule):
    func, _ = _rows_kernel(schedule, bounded=False)
    length = func.inputs[1]
    assert not any(isinstance(s, For) and _reads_length(s.extent, length) or
                   isinstance(s, IfThenElse) and _reads_length(s.cond, length) for s in walk_stmt(func.body))
    assert all(isinstance(s.extent.value, int) for s in walk_stmt(func.body) if isinstance(s, For))


def _weights_times_values():
    """out[i, j] = sum_k w[i, k] * v[k, j], where w holds 0 past len[0] along k (a mask's output)."""
    w = te.placeholder((ROWS, COLS), "float32", "w")
    v = te.placeholder((COLS, 8), "float32", "v")
    length = te.placeholder((1,), "int64", "len")
    k = te.reduce_axis(COLS, "k")
    out = te.compute((ROWS, 8), lambda i, j: te.sum(w[i, k] * v[k, j], k), name="out")
    sch = create_schedule([out])
    sch.run_time_fills = {id(w.op): {1: (length(0), 0.0)}}
    return lower(sch, [w, v, length, out], "weights_times_values")


def test_a_sum_over_an_input_holding_zero_past_the_length_stops_there():
    func = _weights_times_values()
    length = func.inputs[2]
    (reduce_loop,) = [s for s in walk_stmt(func.body) if isinstance(s, For) and s.var.name.startswith("k")]
    assert str(reduce_loop.extent) == f"min({COLS}, {length.name}[0])"
    with tempfile.TemporaryDirectory() as tmp:
        lib = load_kernels(build_library([func], get_target("x86-64-v3"), f"{tmp}/sum.so"))
    rng = np.random.default_rng(5)
    w = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    v = rng.standard_normal((COLS, 8)).astype(np.float32)
    w[:, 10:] = np.nan  # past the length: never read (the fill promises 0 there, so the sum is the same)
    out = np.full((ROWS, 8), SENTINEL, np.float32)
    lib.call("weights_times_values", w, v, np.array([10], np.int64), out)
    np.testing.assert_allclose(out, w[:, :10] @ v[:10], rtol=1e-5, atol=1e-5)


def test_values_packed_for_a_sum_that_stops_at_the_length_stop_there_too():
    w = te.placeholder((ROWS, COLS), "float32", "w")
    v = te.placeholder((COLS, 8), "float32", "v")
    length = te.placeholder((1,), "int64", "len")
    packed = te.compute((8 // 4, COLS, 4), lambda p, k, j: v[k, p * 4 + j], name="packed")  # panels along K
    k = te.reduce_axis(COLS, "k")
    out = te.compute((ROWS, 8), lambda i, j: te.sum(w[i, k] * packed[j // 4, k, j % 4], k), name="out")
    sch = create_schedule([out])
    sch.run_time_fills = {id(w.op): {1: (length(0), 0.0)}}
    func = lower(sch, [w, v, length, out], "packed_values")
    pack_loops = [s for s in walk_stmt(func.body) if isinstance(s, For) and _reads_length(s.extent, func.inputs[2])
                  and "packed" in str(s.body) and "out" not in str(s.body)]
    assert len(pack_loops) == 1 and str(pack_loops[0].extent) == f"min({COLS}, {func.inputs[2].name}[0])"
    with tempfile.TemporaryDirectory() as tmp:
        lib = load_kernels(build_library([func], get_target("x86-64-v3"), f"{tmp}/packed.so"))
    rng = np.random.default_rng(6)
    for valid in (0, 1, 10, COLS):
        w_value = rng.standard_normal((ROWS, COLS)).astype(np.float32)
        v_value = rng.standard_normal((COLS, 8)).astype(np.float32)
        w_value[:, valid:] = 0.0
        v_value[valid:] = np.nan  # past the length: neither packed nor summed
        out_value = np.full((ROWS, 8), SENTINEL, np.float32)
        (space,) = [np.full(b.shape, np.nan, b.dtype) for b in func.workspaces]
        lib.call("packed_values", w_value, v_value, np.array([valid], np.int64), out_value, space)
        np.testing.assert_allclose(out_value, w_value[:, :valid] @ v_value[:valid], rtol=1e-5, atol=1e-5)
        assert np.isnan(space[:, valid:]).all()


def test_a_softmax_over_an_input_holding_minus_infinity_past_the_length_reduces_only_up_to_it():
    from core.kernels.softmax import softmax

    x = te.placeholder((3, 128), "float32", "x")
    length = te.placeholder((1,), "int64", "len")
    (out,) = softmax([x], {"axis": -1}, [])
    sch = create_schedule([out])
    sch.run_time_fills = {id(x.op): {1: (length(0), float("-inf"))}}
    func = lower(sch, [x, length, out], "masked_softmax")
    reads = [s for s in walk_stmt(func.body) if isinstance(s, For) and _reads_length(s.extent, func.inputs[1])]
    # the lane partials of the max and of the sum of exp(x - max) stop at ceil(len / 32) chunks, and exp(x - max)
    # itself (0 past the length) at the length: its readers read it through a select of 0 there
    assert sorted(s.var.name[:2] for s in reads) == ["i1", "rc", "rc"]
    (exp_loop,) = [s for s in reads if s.var.name.startswith("i1")]
    assert str(exp_loop.extent) == f"min(128, {func.inputs[1].name}[0])" and "softmax_exp" in str(exp_loop.body)
    with tempfile.TemporaryDirectory() as tmp:
        lib = load_kernels(build_library([func], get_target("x86-64-v3"), f"{tmp}/softmax.so"))
    x_value = np.random.default_rng(2).standard_normal((3, 128)).astype(np.float32)
    for valid in (1, 40, 64, 100, 128):
        masked = x_value.copy()
        masked[:, valid:] = -np.inf
        out_value = np.empty((3, 128), np.float32)
        workspaces = [np.full(b.shape, np.nan, b.dtype) for b in func.workspaces]
        lib.call("masked_softmax", masked, np.array([valid], np.int64), out_value, *workspaces)
        e = np.exp(masked - masked.max(-1, keepdims=True))
        np.testing.assert_allclose(out_value, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
        (exp_space,) = [w for b, w in zip(func.workspaces, workspaces) if b.name == "softmax_exp"]
        assert np.isnan(exp_space[:, valid:]).all() and not np.isnan(exp_space[:, :valid]).any()


WIDE = 77  # no vector width divides it: the schedule vectorizes the whole axis, which codegen runs in chunks of 8


@pytest.mark.parametrize("bounded", [True, False])
def test_a_vector_loop_alone_along_a_bounded_axis_stops_in_whole_vectors(bounded):
    a = te.placeholder((3, WIDE), "float32", "a")
    length = te.placeholder((1,), "int64", "len")
    out = te.compute((3, WIDE), lambda i, j: a[i, j] * 2.0, name="out")
    sch = create_schedule([out])
    sch[out].vectorize(out.op.axis[1])
    if bounded:
        sch[out].run_time_bounds = {1: length(0)}
    func = lower(sch, [a, length, out], "wide_columns")
    (vector,) = [s for s in walk_stmt(func.body) if isinstance(s, For) and s.kind is ForKind.VECTORIZED]
    assert str(vector.extent) == (f"min({WIDE}, {func.inputs[1].name}[0])" if bounded else str(WIDE))
    with tempfile.TemporaryDirectory() as tmp:
        lib = load_kernels(build_library([func], get_target("x86-64-v3"), f"{tmp}/wide.so"))
    a_value = np.random.default_rng(9).standard_normal((3, WIDE)).astype(np.float32)
    for valid in (0, 1, 8, 9, 71, 72, 73, WIDE):
        out_value = np.full((3, WIDE), SENTINEL, np.float32)
        lib.call("wide_columns", a_value, np.array([valid], np.int64), out_value)
        # whole chunks of 8 up to the one holding the length, the last 5 columns as one group once it passes 72
        done = (min(72, -(-valid // 8) * 8) if valid <= 72 else WIDE) if bounded else WIDE
        np.testing.assert_allclose(out_value[:, :done], a_value[:, :done] * 2.0, rtol=1e-6)
        assert (out_value[:, done:] == SENTINEL).all()


def test_a_vector_loop_of_accumulators_inside_a_reduction_stops_in_whole_vectors_too():
    a = te.placeholder((3, 16), "float32", "a")
    b = te.placeholder((16, WIDE), "float32", "b")
    length = te.placeholder((1,), "int64", "len")
    k = te.reduce_axis(16, "k")
    out = te.compute((3, WIDE), lambda i, j: te.sum(a[i, k] * b[k, j], k), name="out")
    sch = create_schedule([out])
    i, j = out.op.axis
    sch[out].reorder(i, k, j)  # a row of accumulators per k: the scores of a query against every key
    sch[out].vectorize(j)
    sch[out].run_time_bounds = {1: length(0)}
    func = lower(sch, [a, b, length, out], "wide_sums")
    vectors = [s for s in walk_stmt(func.body) if isinstance(s, For) and s.kind is ForKind.VECTORIZED]
    assert len(vectors) == 2 and all(str(s.extent) == f"min({WIDE}, {func.inputs[2].name}[0])" for s in vectors)
    with tempfile.TemporaryDirectory() as tmp:
        lib = load_kernels(build_library([func], get_target("x86-64-v3"), f"{tmp}/wide_sums.so"))
    rng = np.random.default_rng(10)
    a_value = rng.standard_normal((3, 16)).astype(np.float32)
    b_value = rng.standard_normal((16, WIDE)).astype(np.float32)
    for valid in (1, 40, 73):
        out_value = np.full((3, WIDE), SENTINEL, np.float32)
        lib.call("wide_sums", a_value, b_value, np.array([valid], np.int64), out_value)
        done = min(72, -(-valid // 8) * 8) if valid <= 72 else WIDE
        np.testing.assert_allclose(out_value[:, :done], (a_value @ b_value)[:, :done], rtol=1e-5, atol=1e-5)
        assert (out_value[:, done:] == SENTINEL).all()
