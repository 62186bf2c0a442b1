"""Each schedule primitive keeps the computed values: scheduled kernels against the unscheduled ones.

All variants are lowered, compiled into one library and run on the same inputs; errors for misuse
are typed (ScheduleError).
"""
from __future__ import annotations

import tempfile
from typing import Callable

import numpy as np
import pytest

from core.codegen.build import build_library
from core.codegen.kernel_library import load_kernels
from core.errors import ScheduleError
from core.target import get_target
from core.te import tensor as te
from core.te.lower import lower
from core.te.schedule import create_schedule
from core.tir.functor import walk_stmt
from core.tir.stmt import For, ForKind

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
]


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
