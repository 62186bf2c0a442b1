"""The keys' transpose of a ranged decoder step (Q x K^T reads the present keys laid out at their run-time length)
stops at that length and stays a vector loop: the structure (numerics across the classes: test_shape_kv_in_place.py)."""
from __future__ import annotations

from core.codegen.analysis import speculation_safe
from core.tir.expr import BinOp, Load
from core.tir.functor import walk_expr, walk_stmt
from core.tir.stmt import For, ForKind

from tests.core.driver.test_shape_kv_concat import _bucket


def test_the_keys_transpose_runs_whole_vectors_up_to_the_run_time_length():
    graph, exe = _bucket({"input_ids": (1, 1), "past_key_values.0.key": (1, 2, 40, 4)})
    keys = {o for o in graph.outputs if o.startswith("present") and o.endswith("key")}
    transposes = [k for k in exe.kernels if k.ops == ("Transpose",) and set(k.inputs) & keys]
    assert len(transposes) == 2, [(k.ops, k.inputs) for k in exe.kernels]
    funcs = {f.name: f for f in exe.funcs}  # identical kernels share one
    for kernel in transposes:
        loops = [s for s in walk_stmt(funcs[kernel.func].body) if isinstance(s, For) and s.kind is ForKind.VECTORIZED]
        assert len(loops) == 1, kernel.name
        (loop,) = loops
        # min(the class's 41 keys, a length input + 1): the loop bound reads the run-time length
        assert isinstance(loop.extent, BinOp) and loop.extent.op == "min" \
            and any(isinstance(e, Load) for e in walk_expr(loop.extent)), loop.extent
        # its laid-out read (run-time strides, under the layout's bounds) lets codegen run it in whole vectors
        assert speculation_safe(loop.body)
