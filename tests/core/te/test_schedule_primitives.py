"""Each schedule primitive keeps the computed values: scheduled kernels against the unscheduled ones.

All variants are lowered, compiled into one library and run on the same inputs; errors for misuse
are typed (ScheduleError). The memory primitives (cache_read/cache_write, compute_at, storage_align)
and the unroll pragma run over several shapes, and IR checks show each did what it claims.
"""
from __future__ import annotations

import functools
import tempfile
from typing import Callable

import numpy as np
import pytest

from tests.backend_calls import build_library
from core.codegen.kernel_library import load_kernels
from core.errors import ScheduleError
from core.target import get_target
from core.te import tensor as te
from core.te.lower import lower
from core.te.schedule import create_schedule
from core.tir.functor import walk_stmt
from core.tir.stmt import Allocate, For, ForKind, Store

M, N, K = 13, 37, 29  # nothing divides nicely: splits need guards


def elementwise():
    a = te.placeholder((M, N), "float32", "a")
    b = te.placeholder((N,), "float32", "b")
    c = te.compute((M, N), lambda i, j: a[i, j] * 2.0 + b[j], name="c")
    return [a, b], c


def matmul():
    a = te.placeholder((M, K), "float32", "a")
    b = te.placeholder((K, N), "float32", "b")
    k = te.reduce_axis(K, "k")
    c = te.compute((M, N), lambda i, j: te.sum(a[i, k] * b[k, j], k), name="c")
    return [a, b], c


def volume():
    a = te.placeholder((3, 5, 17), "float32", "a")
    c = te.compute((17, 3, 5), lambda x, y, z: a[y, z, x] - 1.0, name="c")
    return [a], c


def chain():
    a = te.placeholder((M, N), "float32", "a")
    b = te.compute((M, N), lambda i, j: a[i, j] + 1.0, name="b")
    c = te.compute((M, N), lambda i, j: b[i, j] * b[i, j], name="c")
    return [a], c


# Each variant: (name, compute factory, schedule function taking (sch, out)).
def _split(sch, c):
    sch[c].split(c.op.axis[1], 8)


def _split_divides(sch, c):
    sch[c].split(c.op.axis[0], nparts=13)


def _split_nparts(sch, c):
    sch[c].split(c.op.axis[1], nparts=4)


def _split_twice(sch, c):
    s = sch[c]
    o, i = s.split(c.op.axis[1], 8)
    s.split(o, 2)


def _fuse(sch, c):
    sch[c].fuse(*c.op.axis)


def _fuse_three(sch, c):
    sch[c].fuse(*c.op.axis)


def _fuse_then_split(sch, c):
    s = sch[c]
    s.split(s.fuse(*c.op.axis), 16)


def _reorder(sch, c):
    s = sch[c]
    s.reorder(*reversed(c.op.axis))


def _reorder_three(sch, c):
    x, y, z = c.op.axis
    sch[c].reorder(z, x, y)


def _tile(sch, c):
    sch[c].tile(*c.op.axis, 4, 8)


def _vectorize(sch, c):
    s = sch[c]
    o, i = s.split(c.op.axis[1], 8)
    s.vectorize(i)


def _vectorize_whole_row(sch, c):
    sch[c].vectorize(c.op.axis[1])


def _parallel(sch, c):
    sch[c].parallel(c.op.axis[0])


def _parallel_fused(sch, c):
    s = sch[c]
    s.parallel(s.fuse(*c.op.axis))


def _unroll(sch, c):
    s = sch[c]
    o, i = s.split(c.op.axis[1], 4)
    s.unroll(i)


def _all_together(sch, c):
    s = sch[c]
    i, j = c.op.axis
    io, jo, ii, ji = s.tile(i, j, 4, 8)
    s.parallel(s.fuse(io, jo))
    s.unroll(ii)
    s.vectorize(ji)


def _mm_split_reduce(sch, c):
    s = sch[c]
    (k,) = c.op.reduce_axis
    ko, ki = s.split(k, 8)
    s.reorder(c.op.axis[0], ko, c.op.axis[1], ki)


def _mm_reduce_outermost(sch, c):
    s = sch[c]
    (k,) = c.op.reduce_axis
    s.reorder(k, *c.op.axis)


def _mm_register_tile(sch, c):
    s = sch[c]
    i, j = c.op.axis
    (k,) = c.op.reduce_axis
    io, ii = s.split(i, 4)
    jo, ji = s.split(j, 8)
    s.reorder(io, jo, k, ii, ji)
    s.unroll(ii)
    s.vectorize(ji)
    s.parallel(s.fuse(io, jo))


def _mm_block_guard(sch, c):
    # Row blocks of 2 tiles over 4 tiles of 4 rows (13 rows): both splits are guarded; the block guard
    # mentions only the outer loops and must sit outside the reduce loop.
    s = sch[c]
    i, j = c.op.axis
    (k,) = c.op.reduce_axis
    io, ii = s.split(i, 4)
    ib, io = s.split(io, 3)
    jo, ji = s.split(j, 8)
    s.reorder(ib, jo, io, k, ii, ji)
    s.unroll(ii)
    s.vectorize(ji)


def _mm_fuse_reduce(sch, c):
    s = sch[c]
    (k,) = c.op.reduce_axis
    ko, ki = s.split(k, 4)
    s.fuse(ko, ki)


def _inline(sch, c):
    b = c.op.input_tensors[0]
    sch[b].compute_inline()


def _inline_and_vectorize(sch, c):
    _inline(sch, c)
    _vectorize(sch, c)


def _producer_scheduled(sch, c):
    b = c.op.input_tensors[0]
    s = sch[b]
    o, i = s.split(b.op.axis[1], 8)
    s.vectorize(i)
    s.parallel(b.op.axis[0])


# -- memory primitives and pragmas, over several shapes (tiles that do not divide, tiles larger than
# the tensor) -----------------------------------------------------------------------------------
SHAPES = [(13, 37, 29), (16, 32, 64), (3, 5, 2)]


def matmul_of(m, n, k):
    a = te.placeholder((m, k), "float32", "a")
    b = te.placeholder((k, n), "float32", "b")
    r = te.reduce_axis(k, "k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], r), name="c")
    return [a, b], c


def chain_of(m, n, k):
    a = te.placeholder((m, n), "float32", "a")
    b = te.compute((m, n), lambda i, j: a[i, j] + 1.0, name="b")
    c = te.compute((m, n), lambda i, j: b[i, j] * b[i, j], name="c")
    return [a], c


def stencil_of(m, n, k):
    # c reads b at two columns: the region of b one tile needs is one column wider than the tile.
    a = te.placeholder((m, n + 1), "float32", "a")
    b = te.compute((m, n + 1), lambda i, j: a[i, j] * 3.0, name="b")
    c = te.compute((m, n), lambda i, j: b[i, j] - b[i, j + 1], name="c")
    return [a], c


def row_scale_of(m, n, k):
    # A reduction computed per row of its consumer: b[i] = sum_k a[i, k]; c[i, j] = b[i] * x[i, j].
    a = te.placeholder((m, k), "float32", "a")
    x = te.placeholder((m, n), "float32", "x")
    r = te.reduce_axis(k, "k")
    b = te.compute((m,), lambda i: te.sum(a[i, r], r), name="b")
    c = te.compute((m, n), lambda i, j: b[i] * x[i, j], name="c")
    return [a, x], c


def _producer(c):
    return c.op.input_tensors[0]


def _cache_write_tile(sch, c):
    cc = sch.cache_write(c, "local")
    xo, yo, xi, yi = sch[c].tile(*c.op.axis, 4, 8)
    sch[cc].compute_at(sch[c], yo)
    ic, jc = cc.op.axis
    (kc,) = sch[cc].reduce_axis
    sch[cc].reorder(kc, ic, jc)
    sch[cc].vectorize(jc)


def _cache_write_parallel(sch, c):
    # The accumulator is allocated inside the parallel loop: each worker thread has its own.
    cc = sch.cache_write(c, "local")
    xo, yo, xi, yi = sch[c].tile(*c.op.axis, 4, 8)
    tile = sch[c].fuse(xo, yo)
    sch[c].parallel(tile)
    sch[cc].compute_at(sch[c], tile)
    sch[cc].vectorize(cc.op.axis[1])
    sch[cc].reorder(sch[cc].reduce_axis[0], *cc.op.axis)


def _cache_read_in_reduce(sch, c):
    # Both operands copied per step of the reduction, inside the tile: a 4 x 1 column of a and a
    # 1 x 8 row of b.
    a, b = c.op.input_tensors
    s = sch[c]
    i, j = c.op.axis
    (k,) = c.op.reduce_axis
    io, ii = s.split(i, 4)
    jo, ji = s.split(j, 8)
    s.reorder(io, jo, k, ii, ji)
    s.vectorize(ji)
    aa = sch.cache_read(a, "local", [c])
    bb = sch.cache_read(b, "local", [c])
    sch[aa].compute_at(s, k)
    sch[bb].compute_at(s, k)


def _cache_write_root(sch, c):
    cc = sch.cache_write(c, "local")  # not attached: a whole-output local accumulator, then one copy
    sch[cc].split(sch[cc].reduce_axis[0], 4)


def _cache_write_elementwise(sch, c):
    cc = sch.cache_write(c, "local")
    io, ii = sch[c].split(c.op.axis[0], 4)
    sch[cc].compute_at(sch[c], io)


def _cache_read_row(sch, c):
    a = c.op.input_tensors[0]
    aa = sch.cache_read(a, "local", [c])
    sch[aa].compute_at(sch[c], c.op.axis[0])  # one row of a per output row


def _cache_read_and_write(sch, c):
    a = c.op.input_tensors[0]
    cc = sch.cache_write(c, "local")
    xo, yo, xi, yi = sch[c].tile(*c.op.axis, 4, 8)
    sch[cc].compute_at(sch[c], yo)
    (kc,) = sch[cc].reduce_axis
    ko, ki = sch[cc].split(kc, 3)
    sch[cc].reorder(ko, ki, *cc.op.axis)
    aa = sch.cache_read(a, "local", [cc])
    sch[aa].compute_at(sch[cc], ko)  # nested: a 4 x 3 panel of a per k block of each tile


def _compute_at_tile(sch, c):
    b = _producer(c)
    xo, yo, xi, yi = sch[c].tile(*c.op.axis, 4, 8)
    sch[b].compute_at(sch[c], yo)


def _compute_at_scheduled_producer(sch, c):
    b = _producer(c)
    xo, yo, xi, yi = sch[c].tile(*c.op.axis, 4, 8)
    sch[b].compute_at(sch[c], yo)
    bo, bi = sch[b].split(b.op.axis[1], 3)  # 3 does not divide the 8- or 9-wide region
    sch[b].vectorize(bi)


def _compute_at_reduction(sch, c):
    b = _producer(c)
    sch[b].compute_at(sch[c], c.op.axis[0])


def _storage_align(sch, c):
    sch[_producer(c)].storage_align(_producer(c).op.axis[0], 8, 0)


def _storage_align_local(sch, c):
    b = _producer(c)
    xo, yo, xi, yi = sch[c].tile(*c.op.axis, 4, 8)
    sch[b].compute_at(sch[c], yo)
    sch[b].storage_align(b.op.axis[0], 16, 1)  # local rows padded to 16k + 1 elements


def _pragma_unroll(sch, c):
    sch[c].pragma(c.op.axis[1], "unroll", 4)


def _mm_pragma_unroll(sch, c):
    s = sch[c]
    (k,) = c.op.reduce_axis
    s.reorder(c.op.axis[0], k, c.op.axis[1])
    s.pragma(k, "unroll", 2)
    s.vectorize(c.op.axis[1])


MEMORY_VARIANTS = [
    ("cache_write_tile", matmul_of, _cache_write_tile), ("cache_write_root", matmul_of, _cache_write_root),
    ("cache_write_parallel", matmul_of, _cache_write_parallel),
    ("cache_read_in_reduce", matmul_of, _cache_read_in_reduce),
    ("cache_write_elementwise", chain_of, _cache_write_elementwise), ("cache_read_row", matmul_of, _cache_read_row),
    ("cache_read_and_write", matmul_of, _cache_read_and_write), ("compute_at_tile", chain_of, _compute_at_tile),
    ("compute_at_stencil", stencil_of, _compute_at_tile),
    ("compute_at_scheduled_producer", stencil_of, _compute_at_scheduled_producer),
    ("compute_at_reduction", row_scale_of, _compute_at_reduction), ("storage_align", chain_of, _storage_align),
    ("storage_align_local", stencil_of, _storage_align_local), ("pragma_unroll", chain_of, _pragma_unroll),
    ("mm_pragma_unroll", matmul_of, _mm_pragma_unroll),
]


def _shaped(name, factory, schedule, shape, first):
    # The first shape keeps the plain name, for the IR checks below.
    return (name if first else f"{name}_{'x'.join(map(str, shape))}", functools.partial(factory, *shape), schedule)


VARIANTS: list[tuple[str, Callable, Callable]] = [
    ("split", elementwise, _split), ("split_divides", elementwise, _split_divides),
    ("split_nparts", elementwise, _split_nparts), ("split_twice", elementwise, _split_twice),
    ("fuse", elementwise, _fuse), ("fuse_three", volume, _fuse_three), ("fuse_then_split", volume, _fuse_then_split),
    ("reorder", elementwise, _reorder), ("reorder_three", volume, _reorder_three), ("tile", elementwise, _tile),
    ("vectorize", elementwise, _vectorize), ("vectorize_whole_row", elementwise, _vectorize_whole_row),
    ("parallel", elementwise, _parallel), ("parallel_fused", elementwise, _parallel_fused),
    ("unroll", elementwise, _unroll), ("all_together", elementwise, _all_together),
    ("mm_split", matmul, _split), ("mm_tile", matmul, _tile), ("mm_split_reduce", matmul, _mm_split_reduce),
    ("mm_reduce_outermost", matmul, _mm_reduce_outermost), ("mm_register_tile", matmul, _mm_register_tile),
    ("mm_fuse_reduce", matmul, _mm_fuse_reduce), ("mm_block_guard", matmul, _mm_block_guard), ("mm_vectorize", matmul, _vectorize),
    ("mm_unroll", matmul, _unroll), ("mm_parallel", matmul, _parallel),
    ("inline", chain, _inline), ("inline_and_vectorize", chain, _inline_and_vectorize),
    ("producer_scheduled", chain, _producer_scheduled),
] + [_shaped(name, factory, schedule, shape, k == 0) for name, factory, schedule in MEMORY_VARIANTS
     for k, shape in enumerate(SHAPES)]


@pytest.fixture(scope="module")
def outputs():
    """name -> (scheduled output, unscheduled output, lowered scheduled func)."""
    target = get_target("native")
    funcs, feeds = [], {}
    rng = np.random.default_rng(0)
    for name, factory, schedule in VARIANTS:
        for scheduled in (True, False):
            inputs, out = factory()
            sch = create_schedule(out)
            if scheduled:
                schedule(sch, out)
            funcs.append(lower(sch, inputs + [out], f"{name}_{'s' if scheduled else 'u'}"))
        feeds[name] = [rng.standard_normal(t.shape).astype(np.float32) for t in inputs]
    with tempfile.TemporaryDirectory(prefix="kiln-te-") as tmp:  # a loaded library outlives its file
        lib = load_kernels(build_library(funcs, target, f"{tmp}/prims.so"))
    by_name = {f.name: f for f in funcs}
    results = {}
    for name, _, _ in VARIANTS:
        got = []
        for suffix in ("s", "u"):
            func = by_name[f"{name}_{suffix}"]
            out = np.full(func.outputs[0].shape, np.nan, np.float32)
            workspaces = [np.full(b.shape, np.nan, b.dtype) for b in func.workspaces]
            lib.call(func.name, *feeds[name], out, *workspaces)
            got.append(out)
        results[name] = (got[0], got[1], by_name[f"{name}_s"])
    return results


@pytest.mark.parametrize("name", [v[0] for v in VARIANTS])
def test_scheduled_equals_unscheduled(name, outputs):
    scheduled, unscheduled, _ = outputs[name]
    assert not np.isnan(unscheduled).any()
    np.testing.assert_allclose(scheduled, unscheduled, rtol=1e-5, atol=1e-5)


def test_unscheduled_matches_numpy(outputs):
    # Anchors the comparison: the unscheduled elementwise and matmul kernels are right in themselves.
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((M, N)).astype(np.float32), rng.standard_normal((N,)).astype(np.float32)
    np.testing.assert_allclose(outputs["split"][1], a * 2 + b, rtol=1e-6)


def _kinds(func):
    return {s.kind for s in walk_stmt(func.body) if isinstance(s, For)}


def test_annotations_reach_the_loop_program(outputs):
    assert ForKind.VECTORIZED in _kinds(outputs["vectorize"][2])
    assert ForKind.PARALLEL in _kinds(outputs["parallel_fused"][2])
    assert ForKind.UNROLLED in _kinds(outputs["unroll"][2])
    assert _kinds(outputs["mm_register_tile"][2]) >= {ForKind.PARALLEL, ForKind.UNROLLED, ForKind.VECTORIZED}


def test_guards_sit_inside_the_innermost_loop_they_mention(outputs):
    from core.tir.expr import Var
    from core.tir.functor import walk_expr
    from core.tir.stmt import IfThenElse

    func = outputs["mm_block_guard"][2]
    reduce_loops = [s for s in walk_stmt(func.body) if isinstance(s, For) and s.var.name.startswith("k")]
    assert reduce_loops
    for loop in reduce_loops:  # a guard inside the reduce loop mentions a loop of its own (the row guard)
        inner = {s.var for s in walk_stmt(loop) if isinstance(s, For)}
        for s in walk_stmt(loop.body):
            if isinstance(s, IfThenElse):
                assert any(isinstance(v, Var) and v in inner for v in walk_expr(s.cond)), s.cond
    # ... and the block guard, which only the outer loops decide, encloses the reduce loop.
    assert any(isinstance(s, IfThenElse) and any(x is loop for x in walk_stmt(s.then_case))
               for s in walk_stmt(func.body) for loop in reduce_loops)


def test_inline_removes_the_intermediate_buffer(outputs):
    assert not outputs["inline"][2].workspaces
    assert [b.name for b in outputs["producer_scheduled"][2].workspaces] == ["b"]


def test_misuse_raises_schedule_errors():
    inputs, c = matmul()
    sch = create_schedule(c)
    s = sch[c]
    i, j = c.op.axis
    (k,) = c.op.reduce_axis
    with pytest.raises(ScheduleError):
        s.split(i, factor=2, nparts=2)
    io, ii = s.split(i, 4)
    with pytest.raises(ScheduleError, match="not a leaf"):
        s.split(i, 2)
    with pytest.raises(ScheduleError, match="adjacent"):
        s.fuse(io, j)
    with pytest.raises(ScheduleError, match="reduce"):
        s.fuse(j, k)
    with pytest.raises(ScheduleError, match="reduce"):
        s.parallel(k)
    with pytest.raises(ScheduleError, match="reduction"):
        s.compute_inline()
    with pytest.raises(ScheduleError, match="twice"):
        s.reorder(j, j)
    with pytest.raises(ScheduleError, match="placeholder"):
        sch[inputs[0]]


# -- IR checks of the memory primitives and the pragma -------------------------------------------
def _allocations(func):
    return {s.buffer.name: s for s in walk_stmt(func.body) if isinstance(s, Allocate)}


def _loops_around(func, pred):
    """For each statement matching `pred`: the loop variables (names) enclosing it."""
    found = []

    def visit(stmt, loops):
        if pred(stmt):
            found.append(loops)
        if isinstance(stmt, For):
            visit(stmt.body, loops + [stmt.var.name])
        elif isinstance(stmt, Allocate):
            visit(stmt.body, loops)
        elif hasattr(stmt, "stmts"):
            for x in stmt.stmts:
                visit(x, loops)
        elif hasattr(stmt, "then_case"):
            visit(stmt.then_case, loops)
            if stmt.else_case is not None:
                visit(stmt.else_case, loops)

    visit(func.body, [])
    return found


def test_cache_write_accumulates_locally_and_writes_back_once_per_tile(outputs):
    func = outputs["cache_write_tile"][2]
    local = _allocations(func)["c.local"]
    assert local.buffer.scope == "local" and local.buffer.numel == 4 * 8  # one tile, not the whole output
    # The accumulator lives inside the tile loops (so each tile, and each thread, has its own).
    (around,) = _loops_around(func, lambda s: isinstance(s, Allocate) and s.buffer.name == "c.local")
    assert len(around) == 2 and all(v.endswith(".o") for v in around)
    to_c = _loops_around(func, lambda s: isinstance(s, Store) and s.buffer.name == "c")
    assert len(to_c) == 1 and not any(v.startswith("k") for v in to_c[0])  # one write-back, no reduce loop
    updates = _loops_around(func, lambda s: isinstance(s, Store) and s.buffer.name == "c.local")
    assert any(any(v.startswith("k") for v in loops) for loops in updates)  # the reduction updates the local tile
    parallel = outputs["cache_write_parallel"][2]
    (loop,) = [s for s in walk_stmt(parallel.body) if isinstance(s, For) and s.kind is ForKind.PARALLEL]
    assert "c.local" in {s.buffer.name for s in walk_stmt(loop.body) if isinstance(s, Allocate)}  # one per thread


def test_cache_read_copies_only_the_region_its_loop_reads(outputs):
    assert _allocations(outputs["cache_read_row"][2])["a.local"].buffer.numel == 29  # one row of a (K = 29)
    allocs = _allocations(outputs["cache_read_in_reduce"][2])
    assert allocs["a.local"].buffer.shape == (4, 1) and allocs["b.local"].buffer.shape == (1, 8)
    allocs = _allocations(outputs["cache_read_and_write"][2])
    assert allocs["a.local"].buffer.numel == 4 * 3 and allocs["c.local"].buffer.numel == 4 * 8


def test_compute_at_allocates_the_inferred_region(outputs):
    assert _allocations(outputs["compute_at_tile"][2])["b"].buffer.shape == (4, 8)
    assert _allocations(outputs["compute_at_stencil"][2])["b"].buffer.shape == (4, 9)  # the tile + one column
    assert _allocations(outputs["compute_at_reduction"][2])["b"].buffer.shape == (1,)
    for name in ("compute_at_tile", "compute_at_stencil", "compute_at_reduction"):
        assert not outputs[name][2].workspaces  # no whole intermediate any more


def test_storage_align_pads_the_row_stride(outputs):
    func = outputs["storage_align"][2]
    (b,) = func.workspaces
    assert b.shape == (13, 40)  # rows of 37 padded to a multiple of 8
    assert any("* 40" in str(s.index) for s in walk_stmt(func.body) if isinstance(s, Store) and s.buffer is b)
    local = _allocations(outputs["storage_align_local"][2])["b"].buffer
    assert local.shape == (4, 17)  # a 4 x 9 region with rows padded to 16k + 1


def test_pragma_unroll_becomes_llvm_loop_metadata(outputs):
    from core.codegen.build import lower_to_llvm_ir

    func = outputs["pragma_unroll"][2]
    loops = [s for s in walk_stmt(func.body) if isinstance(s, For) and s.annotations]
    assert len(loops) == 1 and loops[0].annotations == (("pragma_unroll", 4),) and loops[0].kind is ForKind.SERIAL
    text = lower_to_llvm_ir([func])
    assert '!"llvm.loop.unroll.count", i32 4' in text and text.count("!llvm.loop ") == 1
    assert '"llvm.loop.unroll.count", i32 2' in lower_to_llvm_ir([outputs["mm_pragma_unroll"][2]])
    assert "llvm.loop.unroll.count" not in lower_to_llvm_ir([outputs["unroll"][2]])  # full unroll is distinct


def test_memory_primitives_misuse_raises_schedule_errors():
    inputs, c = chain_of(13, 37, 1)
    b = _producer(c)
    sch = create_schedule(c)
    io, ii = sch[c].split(c.op.axis[0], 4)
    with pytest.raises(ScheduleError, match="not a loop"):
        sch[b].compute_at(sch[c], c.op.axis[0])  # split away: not a leaf any more
    with pytest.raises(ScheduleError, match="not a loop"):
        sch[b].compute_at(sch[c], b.op.axis[0])  # an axis of another stage
    with pytest.raises(ScheduleError, match="itself"):
        sch[b].compute_at(sch[b], b.op.axis[0])
    sch[b].compute_at(sch[c], io)
    with pytest.raises(ScheduleError, match="computed inside"):
        sch[c].compute_at(sch[b], b.op.axis[0])  # a cycle
    with pytest.raises(ScheduleError, match="before splitting"):
        sch.cache_write(c, "local")
    with pytest.raises(ScheduleError, match="scope"):
        sch.cache_read(inputs[0], "texture", [b])
    with pytest.raises(ScheduleError, match="does not read"):
        sch.cache_read(inputs[0], "local", [c])
    with pytest.raises(ScheduleError, match="innermost"):
        sch[b].storage_align(b.op.axis[1], 8)
    with pytest.raises(ScheduleError, match="offset"):
        sch[b].storage_align(b.op.axis[0], 8, 8)
    with pytest.raises(ScheduleError, match="unknown key"):
        sch[c].pragma(ii, "unroll_and_jam", 2)
    with pytest.raises(ScheduleError, match="positive"):
        sch[c].pragma(ii, "unroll", 0)
    sch[c].vectorize(ii)
    with pytest.raises(ScheduleError, match="serial"):
        sch[c].pragma(ii, "unroll", 2)

    # Lowering checks: a producer computed per tile may have no other reader, and must not be an output.
    a = te.placeholder((8, 8), "float32", "a")
    p = te.compute((8, 8), lambda i, j: a[i, j] + 1.0, name="p")
    q = te.compute((8, 8), lambda i, j: p[i, j] * 2.0, name="q")
    r = te.compute((8, 8), lambda i, j: p[i, j] + q[i, j], name="r")
    sch = create_schedule(r)
    sch[p].compute_at(sch[q], q.op.axis[0])
    with pytest.raises(ScheduleError, match="also read by r"):
        lower(sch, [a, r], "bad_reader")
    sch = create_schedule(q)
    sch[p].compute_at(sch[q], q.op.axis[0])
    with pytest.raises(ScheduleError, match="argument"):
        lower(sch, [a, p, q], "bad_output", num_outputs=2)
    sch = create_schedule(q)
    sch[q].storage_align(q.op.axis[0], 16)
    with pytest.raises(ScheduleError, match="argument"):
        lower(sch, [a, q], "bad_align")
    sch = create_schedule(q)
    sch[q].vectorize(q.op.axis[1])
    sch[p].compute_at(sch[q], q.op.axis[1])
    with pytest.raises(ScheduleError, match="vectorized"):
        lower(sch, [a, q], "bad_vector")
    s = te.compute((8, 8), lambda i, j: q[i, j] * 3.0, name="s")
    sch = create_schedule(s)
    sch[p].compute_at(sch[q], q.op.axis[0])
    sch[q].compute_inline()  # after the attach: q has no loops left to hold p
    with pytest.raises(ScheduleError, match="inlined"):
        lower(sch, [a, s], "bad_inlined_parent")


def test_matmul_template_exposes_the_unroll_pragma_as_a_knob():
    from core.codegen.build import lower_to_llvm_ir
    from core.kernels.schedules.matmul import schedule_matmul
    from tests.helpers.kernel_runs import OpKernel, build_kernels
    from tests.backend_calls import get_template

    rng = np.random.default_rng(1)
    # Two rows: too few to pack B, so the product runs the register-tile schedule (matmul.py) that has the knob.
    a, b = rng.standard_normal((2, 300)).astype(np.float32), rng.standard_normal((300, 24)).astype(np.float32)
    target = get_target("native")
    kernel = OpKernel("mm_k_unroll", "MatMul", [a, b],
                      schedule_fn=lambda sch, outs, tgt: schedule_matmul(sch, outs, tgt, k_unroll=4))
    (run,) = build_kernels([kernel], target)
    np.testing.assert_allclose(run.run()[0], a @ b, rtol=1e-4, atol=1e-4)
    assert '"llvm.loop.unroll.count", i32 4' in lower_to_llvm_ir([kernel.func])
    template = get_template("MatMul", target)
    (op,) = [s.op for s in kernel.schedule.stages if s.op.tag == "matmul"]
    (stage,) = [s for s in kernel.schedule.stages if s.op is op]
    assert template.read_default(stage)["k_unroll"] == 4  # a tuned point reads back as itself
    space = template.define(op, target, {"row": 6, "col": 16, "k_tile": 300, "k_unroll": 1})
    assert [k.name for k in space.knobs][-1] == "k_unroll" and len(space.knobs[-1]) == 4  # 1, 2, 4, 8
