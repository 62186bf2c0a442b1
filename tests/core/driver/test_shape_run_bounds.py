"""Kernels of one upper-bound artifact take the masked dim's run-time length as their loop bound."""
from __future__ import annotations

import numpy as np

import core
from core.backends import resolve
from core.driver.shape_plan import shape_plan
from core.lowering.executable import build_executable
from core.tir.expr import IntImm, Load
from core.tir.functor import walk_expr, walk_stmt
from core.tir.stmt import For, IfThenElse

from tests.core.driver.dynamic_models import (assert_same_outputs, greedy_tokens, ort_runner, tiny_decoder,
                                              tiny_encoder)

RANGES = {"input_ids": "1..4,1..64"}


def _top_executable(model: bytes, ranges):
    """The kernels of the largest compiled shape, as the pipeline builds them, and its graph."""
    tgt, backend = resolve("x86-64-v3")
    graph = shape_plan(model, model, ranges).import_graphs()[-1]
    graph = backend.optimize(graph, 3, tgt)
    return build_executable(graph, tgt, backend), graph


def _reads(expr, buffer) -> bool:
    return any(isinstance(x, Load) and x.buffer is buffer for x in walk_expr(expr))


def _stops_at(func, length_index: int) -> bool:
    """Whether a loop of `func` takes input `length_index` as its extent, or skips iterations past it."""
    length = func.params[length_index]
    return any(isinstance(s, For) and _reads(s.extent, length) or isinstance(s, IfThenElse) and _reads(s.cond, length)
               for s in walk_stmt(func.body))


def test_encoder_kernels_take_the_sequence_length_as_their_loop_bound(one_compiled_shape):
    exe, graph = _top_executable(tiny_encoder(), RANGES)
    assert "seq::length" in graph.inputs
    funcs = {f.name: f for f in exe.funcs}
    stopping = {}
    for kernel in exe.kernels:
        func = funcs[kernel.func]
        if "seq::length" in kernel.inputs and kernel.ops != ("Where",):
            stopping[kernel.name] = _stops_at(func, kernel.inputs.index("seq::length"))
        if {"MatMul", "Softmax", "LayerNormalization"} & set(kernel.ops):
            assert "seq::length" in kernel.inputs, kernel  # every row-wise kernel gets the length
    by_op = lambda op: [name for name in stopping if op in name]  # noqa: E731
    assert by_op("matmul") and by_op("softmax") and by_op("layernormalization")
    assert all(stopping[name] for name in by_op("matmul") + by_op("softmax") + by_op("layernormalization"))
    # QK^T's output is the softmax's mask (-inf past the length along the keys): its rows stop at the length, and
    # along the keys its product stops there while its epilogue still writes the fill
    scores = next(k for k in exe.kernels if k.ops[:1] == ("MatMul",) and "Where" in k.ops)
    assert graph.run_time_bounds[scores.outputs[0]] == ((0, "batch::length"), (2, "seq::length"))
    assert graph.run_time_fills[scores.outputs[0]][-1] == (3, "seq::length", float("-inf"))
    func = funcs[scores.func]
    length = func.params[scores.inputs.index("seq::length")]
    # the product's tiles along the keys stop at the length (a loop extent or a guard reads it)...
    assert any(isinstance(s, For) and s.var.name.startswith("i3") and _reads(s.extent, length) or
               isinstance(s, IfThenElse) and "i3" in str(s.cond) and _reads(s.cond, length) for s in walk_stmt(func.body))
    # ...while the epilogue writes the fill over every key
    assert any(isinstance(s, For) and s.var.name.startswith("i3") and str(s.extent) == "64" for s in walk_stmt(func.body))
    # attention weights times values: the sum over the keys stops at the length (the weights hold 0 past it)
    context = next(k for k in exe.kernels if k.ops == ("MatMul",) and k.inputs[0] in graph.run_time_fills)
    func = funcs[context.func]
    length = func.params[context.inputs.index("seq::length")]
    assert any(isinstance(s, For) and s.var.name.startswith("rk") and _reads(s.extent, length)
               for s in walk_stmt(func.body))


def test_the_padded_batch_reaches_row_wise_kernels_as_a_run_time_length(one_compiled_shape):
    exe, graph = _top_executable(tiny_encoder(), RANGES)
    assert graph.inputs[-2:] == ("seq::length", "batch::length")  # after the masked lengths, as kiln_shaped passes them
    funcs = {f.name: f for f in exe.funcs}
    rows = [k for k in exe.kernels if {"MatMul", "Softmax", "LayerNormalization"} & set(k.ops)]
    assert rows and all("batch::length" in k.inputs and _stops_at(funcs[k.func], k.inputs.index("batch::length"))
                        for k in rows)
    # integer values keep every row (padding rows could make a gather's indices out of range)
    integers = [v for v, t in graph.types.items() if t.dtype.startswith("int")]
    assert "input_ids" in integers
    assert not any(n == "batch::length" for v in integers for _, n in graph.run_time_bounds.get(v, ()))


def test_one_upper_bound_artifact_matches_onnxruntime_between_sizes(one_compiled_shape):
    model = tiny_encoder()
    art = core.compile(model, input_shapes=RANGES, benchmark=False)
    assert len(art.metadata["dynamic_shapes"]["buckets"]) == 1
    run = ort_runner(model)
    rng = np.random.default_rng(11)
    with art.load() as module:
        for batch, seq in ((1, 1), (3, 5), (2, 33), (1, 47), (4, 63), (4, 64), (2, 9)):
            feeds = {"input_ids": rng.integers(0, 50, (batch, seq)).astype(np.int64)}
            assert_same_outputs(module.run(feeds), run(feeds))


DECODER_RANGES = {"input_ids": "1..4,1..8", "past_key_values.0.key": "1..4,2,0..56,4"}


def test_decoder_attention_over_past_and_new_keys_stops_at_their_sum(one_compiled_shape):
    exe, graph = _top_executable(tiny_decoder(), DECODER_RANGES)
    total = "past_sequence_length::length+sequence_length::length"
    assert all((2, total) in graph.run_time_bounds[o] for o in graph.outputs if o.startswith("present"))
    funcs = {f.name: f for f in exe.funcs}
    for op in ("Softmax", "MatMul"):  # the softmax over the keys, and the weights times the values
        kernel = next(k for k in exe.kernels if k.ops == (op,) and any(i in graph.run_time_fills for i in k.inputs))
        func = funcs[kernel.func]
        past, new = (func.params[kernel.inputs.index(n)] for n in total.split("+"))
        assert any(isinstance(s, For) and _reads(s.extent, past) and _reads(s.extent, new)
                   for s in walk_stmt(func.body)), kernel


def test_decoder_with_bounded_kernels_generates_like_onnxruntime(one_compiled_shape):
    model = tiny_decoder()
    art = core.compile(model, input_shapes=DECODER_RANGES, benchmark=False)
    prompt = [2, 7, 1, 8, 2]
    expected, reference = greedy_tokens(ort_runner(model), prompt, steps=16)
    with art.load() as module:
        tokens, outputs = greedy_tokens(module.run, prompt, steps=16)
    assert tokens == expected
    for got, ref in zip(outputs, reference):
        assert_same_outputs(got, ref, atol=1e-4)


def _class_bucket(model: bytes, ranges, shapes: dict):
    """The graph and kernels of the bucket compiled at exactly `shapes` (input -> shape; a length class), with
    the default specializations."""
    tgt, backend = resolve("x86-64-v3")
    graph = next(g for g in shape_plan(model, model, ranges).import_graphs()
                 if all(g.type_of(name).shape == tuple(shape) for name, shape in shapes.items()))
    graph = backend.optimize(graph, 3, tgt)
    return build_executable(graph, tgt, backend), graph


def test_a_length_class_whose_new_tokens_are_one_stops_the_attention_at_past_plus_one():
    # the bucket of one new token over a past of 16: its keys' length is past + 1, a length input plus a constant
    exe, graph = _class_bucket(tiny_decoder(), DECODER_RANGES, {"input_ids": (1, 1), "past_key_values.0.key": (1, 2, 16, 4)})
    keys = "past_sequence_length::length+1"
    assert all((2, keys) in graph.run_time_bounds[o] for o in graph.outputs if o.startswith("present"))
    funcs = {f.name: f for f in exe.funcs}
    past = "past_sequence_length::length"
    for ops in (("Transpose",), ("Softmax",)):  # the keys' transpose (its vector loop) and the softmax
        kernels = [k for k in exe.kernels if k.ops == ops and past in k.inputs]
        assert kernels and all(_stops_at(funcs[k.func], k.inputs.index(past)) for k in kernels), ops
    # the softmax's weights (0 past the keys: it computes whole rows of a -inf-masked input) reach the product with
    # the values as they are, with no mask of their own
    softmax = {o for k in exe.kernels if k.ops == ("Softmax",) for o in k.outputs}
    context = [k for k in exe.kernels if k.ops[:1] == ("MatMul",) and k.inputs[0] in softmax]
    assert len(context) == 2 and all(graph.run_time_fills[k.inputs[0]] == ((3, keys, 0.0),) for k in context)
    assert all(_stops_at(funcs[k.func], k.inputs.index(past)) for k in context)


def test_length_classes_match_onnxruntime_at_and_around_their_sizes():
    model = tiny_decoder()
    art = core.compile(model, input_shapes=DECODER_RANGES, benchmark=False)
    assert len(art.metadata["dynamic_shapes"]["buckets"]) > 1  # length classes besides the upper bound
    run, rng = ort_runner(model), np.random.default_rng(3)
    with art.load() as module:
        for batch, seq, past in ((1, 1, 3), (1, 1, 4), (1, 1, 5), (1, 1, 15), (1, 1, 16), (1, 1, 17), (1, 4, 16),
                                 (1, 5, 16), (2, 1, 16), (1, 1, 55), (1, 1, 56), (3, 8, 56), (1, 3, 0)):
            feeds = {"input_ids": rng.integers(0, 32, (batch, seq)).astype(np.int64),
                     "attention_mask": np.ones((batch, past + seq), np.int64)}
            for i in range(2):
                for name in ("key", "value"):
                    feeds[f"past_key_values.{i}.{name}"] = rng.standard_normal((batch, 2, past, 4)).astype(np.float32)
            assert_same_outputs(module.run(feeds), run(feeds))


def test_a_static_compile_of_the_decoder_takes_no_length_and_keeps_every_loop_static():
    from core.frontend import import_onnx

    model = tiny_decoder()
    tgt, backend = resolve("x86-64-v3")
    shapes = {"input_ids": (1, 1), "attention_mask": (1, 18),
              **{f"past_key_values.{i}.{n}": (1, 2, 17, 4) for i in range(2) for n in ("key", "value")}}
    graph = backend.optimize(import_onnx(model, input_shapes=shapes), 3, tgt)
    assert not graph.run_time_bounds and not graph.run_time_fills
    exe = build_executable(graph, tgt, backend)
    assert not any("::length" in i for k in exe.kernels for i in k.inputs)
    assert all(isinstance(s.extent, IntImm) for f in exe.funcs for s in walk_stmt(f.body) if isinstance(s, For))
