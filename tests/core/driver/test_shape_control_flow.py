"""Input-shape ranges together with If and Loop run at run time (refused up front before): every compiled shape has
its own branch and body runners in the one library. A variable is padded through an If whose branches, or a Loop
whose body, keep it in place; one that a condition reads across matches a compiled size.
Compared with ONNX Runtime, both branches taken, loops of several trip counts."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import core
from core.runtime.loader import KilnRuntimeError
from tests.core.frontend.test_frontend_control_flow import BOOL, F32, I64, _const, _value
from tests.core.frontend.test_frontend_control_flow_runtime import _if_model, _model

pytestmark = pytest.mark.timeout(600)


def _compare(module, session, feeds: dict) -> None:
    theirs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    ours = module.run(feeds)
    assert set(ours) == set(theirs)
    for name, expected in theirs.items():
        assert ours[name].shape == expected.shape, name
        np.testing.assert_allclose(ours[name], expected, rtol=1e-5, atol=1e-5, err_msg=name)


def _validated(art) -> None:
    validation = art.report["validation"]
    assert validation["passed"] is True and validation["samples"] >= len(art.metadata["dynamic_shapes"]["buckets"])


def test_an_if_beside_a_padded_input_takes_both_branches_at_every_size_in_range():
    model = onnx.load_from_string(_if_model())  # branches of different ranks, plus an input of any length
    model.graph.input.append(_value("u", F32, ["n"]))
    model.graph.output.append(_value("v", F32, ["n"]))
    model.graph.node.append(helper.make_node("Relu", ["u"], ["v"]))
    model = model.SerializeToString()
    art = core.compile(model, input_shapes={"u": "1..8"}, benchmark=False)
    _validated(art)
    assert art.metadata["dynamic_shapes"]["variables"][0]["padded"] is True
    session, rng = ort.InferenceSession(model), np.random.default_rng(0)
    with art.load() as module:
        for n in (1, 3, 6, 8):
            for sign in (1, -1):
                x = (np.abs(rng.standard_normal((2, 3))) * sign).astype(np.float32)
                _compare(module, session, {"x": x, "u": rng.standard_normal(n).astype(np.float32)})


def _if_over_the_batch(condition_on_data: bool = False):
    """y[N, 4] = If(c): relu(x) @ w, else (x * 2) @ w: the ranged batch N runs through both branches; c is an
    input, or sum(x) > 0 (read across the batch)."""
    then_branch = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("MatMul", ["r", "w"], ["t"])],
                                    "then", [], [_value("t", F32, ["N", 4])])
    else_branch = helper.make_graph([_const("two", np.float32(2)), helper.make_node("Mul", ["x", "two"], ["d"]),
                                     helper.make_node("MatMul", ["d", "w"], ["e"])], "else", [], [_value("e", F32, ["N", 4])])
    w = onnx.numpy_helper.from_array(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32), "w")
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)]
    inputs = [_value("x", F32, ["N", 3])]
    if condition_on_data:
        nodes[:0] = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), _const("zero", np.float32(0)),
                     helper.make_node("Greater", ["s", "zero"], ["c"])]
    else:
        inputs.append(_value("c", BOOL, []))
    return _model(nodes, inputs, [_value("y", F32, ["N", 4])], [w])


def test_a_batch_through_both_if_branches_is_padded_and_runs_every_size_in_range():
    model = _if_over_the_batch()
    art = core.compile(model, input_shapes={"x": "1..8,3"}, benchmark=False)
    _validated(art)
    assert art.metadata["dynamic_shapes"]["variables"][0]["padded"] is True
    session, rng = ort.InferenceSession(model), np.random.default_rng(1)
    with art.load() as module:
        for n in (1, 3, 5, 8):
            for taken in (True, False):
                _compare(module, session, {"x": rng.standard_normal((n, 3)).astype(np.float32), "c": np.array(taken)})


def test_an_if_on_the_batchs_data_keeps_it_at_compiled_sizes_and_says_so_between():
    model = _if_over_the_batch(condition_on_data=True)
    art = core.compile(model, input_shapes={"x": "1..8,3"}, benchmark=False)
    _validated(art)
    assert "ReduceSum 's' reduces over the padded axis" in art.metadata["dynamic_shapes"]["not_padded"]["N"]
    session, rng = ort.InferenceSession(model), np.random.default_rng(1)
    with art.load() as module:
        for n in (1, 2, 4, 8):
            for sign in (1, -1):  # both branches
                _compare(module, session, {"x": (np.abs(rng.standard_normal((n, 3))) * sign).astype(np.float32)})
        with pytest.raises(KilnRuntimeError, match="dimension N is 3, but this model was compiled for 1, 2, 4, 8 only"):
            module.run({"x": np.zeros((3, 3), np.float32)})


def _loop_over_a_ranged_vector(stop_on_data: bool = True):
    """acc' = acc / 2 + w * i while i < M and sum(acc') < limit (or i < limit: not reading across acc), acc and w
    of length n; scans acc' each step."""
    stop = ([helper.make_node("ReduceSum", ["acc2"], ["s"], keepdims=0), helper.make_node("Less", ["s", "limit"], ["c2"])]
            if stop_on_data else [helper.make_node("Less", ["fi", "limit"], ["c2"])])
    body = helper.make_graph([
        helper.make_node("Cast", ["i"], ["fi"], to=F32), helper.make_node("Mul", ["w", "fi"], ["wi"]),
        _const("half", np.float32(0.5)), helper.make_node("Mul", ["acc", "half"], ["ah"]),
        helper.make_node("Add", ["ah", "wi"], ["acc2"]), *stop, helper.make_node("Identity", ["acc2"], ["scan"])],
        "body", [_value("i", I64, []), _value("c", BOOL, []), _value("acc", F32, ["n"])],
        [_value("c2", BOOL, []), _value("acc2", F32, ["n"]), _value("scan", F32, ["n"])])
    return _model([helper.make_node("Loop", ["M", "", "acc0"], ["final", "history"], body=body)],
                  [_value("M", I64, []), _value("acc0", F32, ["n"]), _value("w", F32, ["n"]), _value("limit", F32, [])],
                  [_value("final", F32, ["n"]), _value("history", F32, ["t", "n"])])


def _run_loops(module, session, sizes, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for n in sizes:
        for trips, limit in ((5, 100.0), (12, 3.0), (16, 1e9)):  # full runs and an early exit
            _compare(module, session, {"M": np.array(trips, np.int64), "limit": np.array(limit, np.float32),
                                       "acc0": rng.standard_normal(n).astype(np.float32),
                                       "w": rng.standard_normal(n).astype(np.float32)})


def test_a_vector_carried_through_a_loop_is_padded_and_runs_every_size_in_range():
    model = _loop_over_a_ranged_vector(stop_on_data=False)
    art = core.compile(model, input_shapes={"acc0": "1..8", "w": "1..8"}, max_trip_count=16, benchmark=False)
    _validated(art)
    assert art.metadata["dynamic_shapes"]["variables"][0]["padded"] is True
    with art.load() as module:
        _run_loops(module, ort.InferenceSession(model), (1, 3, 6, 8), seed=3)


def test_a_loop_stopping_on_the_vectors_sum_runs_each_compiled_size_with_run_time_trip_counts():
    model = _loop_over_a_ranged_vector()
    art = core.compile(model, input_shapes={"acc0": "1..8:2|5|8", "w": "1..8:2|5|8"}, max_trip_count=16,
                       benchmark=False)
    _validated(art)
    assert [list(b["acc0"]) for b in art.metadata["dynamic_shapes"]["buckets"]] == [[2], [5], [8]]
    assert "ReduceSum 's' reduces over the padded axis" in art.metadata["dynamic_shapes"]["not_padded"]["n"]
    with art.load() as module:
        _run_loops(module, ort.InferenceSession(model), (2, 5, 8), seed=2)
        with pytest.raises(KilnRuntimeError, match="runs past 16 iterations"):  # the bound holds in every bucket
            module.run({"M": np.array(17, np.int64), "limit": np.array(1e9, np.float32),
                        "acc0": np.zeros(5, np.float32), "w": np.zeros(5, np.float32)})
