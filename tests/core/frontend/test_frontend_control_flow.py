"""If, Loop and Scan compiled to native code through core.backend and compared with ONNX Runtime: a
condition known at compile time inlines a branch, one computed from data runs the taken branch, loops unroll
(past the unroll cap they run at run time: test_frontend_control_flow_runtime.py)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from core.onnx_backend.backend import KilnBackend
from core.errors import UnsupportedOpError
from core.frontend import import_onnx
from core.frontend.converters import control_flow
from core.frontend.inspect import unsupported_ops

from .conftest import model_of_values as _model
from .conftest import run_ort

pytestmark = pytest.mark.timeout(300)
F32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _value(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _const(name, value):
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.asarray(value)))


def _assert_same(rep, model, feeds):
    ours = rep.run(feeds)
    theirs = run_ort(model, feeds)
    assert len(ours) == len(theirs)
    for got, expected in zip(ours, theirs):
        assert got.shape == expected.shape and got.dtype == expected.dtype
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def _data_if_model():
    """y = x * 2 if sum(x) > 0 else x - w (w from the outer scope): the condition depends on data."""
    then_branch = helper.make_graph([_const("two", np.float32(2)), helper.make_node("Mul", ["x", "two"], ["t"])],
                                    "then", [], [_value("t", F32, [2, 3])])
    else_branch = helper.make_graph([helper.make_node("Sub", ["x", "w"], ["e"])], "else", [], [_value("e", F32, [2, 3])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), _const("zero", np.float32(0)),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)]
    return _model(nodes, [_value("x", F32, [2, 3]), _value("w", F32, [3])], [_value("y", F32, [2, 3])])


def test_if_on_data_selects_between_both_branches_at_run_time():
    model = _data_if_model()
    rep = KilnBackend.prepare(model)
    rng = np.random.default_rng(0)
    w = rng.standard_normal(3).astype(np.float32)
    for sign in (1, -1):  # both branches taken, one compiled model
        x = (np.abs(rng.standard_normal((2, 3))) * sign).astype(np.float32)
        _assert_same(rep, model, {"x": x, "w": w})
    assert len(rep._compiled) == 1


def test_if_on_data_with_branches_of_different_lengths_gives_a_data_dependent_length():
    then_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [], [_value("t", F32, [4])])
    else_branch = helper.make_graph([_const("e", np.zeros(2, np.float32))], "else", [], [_value("e", F32, [2])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), _const("zero", np.float32(0)),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)]
    model = _model(nodes, [_value("x", F32, [4])], [_value("y", F32, ["n"])])
    rep = KilnBackend.prepare(model)  # both branches, padded to the longer, the length selected too
    for sign in (1, -1):
        _assert_same(rep, model, {"x": np.full(4, sign, np.float32)})


def test_if_on_data_with_branches_of_different_ranks_runs_the_taken_branch():
    then_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [], [_value("t", F32, [4])])
    else_branch = helper.make_graph([_const("e", np.zeros((2, 2), np.float32))], "else", [], [_value("e", F32, [2, 2])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), _const("zero", np.float32(0)),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)]
    model = _model(nodes, [_value("x", F32, [4])], [_value("y", F32, ["n"])])
    rep = KilnBackend.prepare(model)  # each branch compiled on its own; the output's shape is the taken one's
    for sign in (1, -1):
        _assert_same(rep, model, {"x": np.full(4, sign, np.float32)})


def test_if_on_a_condition_input_compiles_the_taken_branch_per_value():
    then_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [], [_value("t", F32, [4])])
    else_branch = helper.make_graph([_const("e", np.arange(2, dtype=np.float32))], "else", [], [_value("e", F32, [2])])
    model = _model([helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)],
                   [_value("c", BOOL, []), _value("x", F32, [4])], [_value("y", F32, ["n"])])
    rep = KilnBackend.prepare(model)
    x = np.arange(4, dtype=np.float32) + 1
    for flag in (True, False):  # branches of different shapes: fine, the condition is known per compile
        _assert_same(rep, model, {"c": np.array(flag), "x": x})


def _loop_body(extra_nodes=(), condition="cond_in"):
    """acc_out = acc_in + x[i] (x from the outer scope), scanned: acc_out * i."""
    nodes = [helper.make_node("Unsqueeze", ["i", "zero_axis"], ["i1"]),
             helper.make_node("Gather", ["x", "i"], ["xi"], axis=0),
             helper.make_node("Add", ["acc_in", "xi"], ["acc_out"]),
             helper.make_node("Cast", ["i"], ["fi"], to=F32),
             helper.make_node("Mul", ["acc_out", "fi"], ["scanned"]),
             *extra_nodes, helper.make_node("Identity", [condition], ["cond_out"])]
    return helper.make_graph([_const("zero_axis", np.array([0], np.int64)), *nodes], "body",
                             [_value("i", I64, []), _value("cond_in", BOOL, []), _value("acc_in", F32, [3])],
                             [_value("cond_out", BOOL, []), _value("acc_out", F32, [3]), _value("scanned", F32, [3])])


def test_loop_with_a_trip_count_computed_from_inputs_unrolls():
    nodes = [_const("one", np.int64(1)), helper.make_node("Add", ["n", "one"], ["trips"]),
             _const("true", np.array(True)),
             helper.make_node("Loop", ["trips", "true", "acc0"], ["acc", "history"], body=_loop_body())]
    model = _model(nodes, [_value("n", I64, []), _value("acc0", F32, [3]), _value("x", F32, [6, 3])],
                   [_value("acc", F32, [3]), _value("history", F32, ["trips", 3])])
    rep = KilnBackend.prepare(model)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 3)).astype(np.float32)
    for n in (3, 5):
        _assert_same(rep, model, {"n": np.array(n, np.int64), "acc0": np.ones(3, np.float32), "x": x})


def test_loop_with_a_condition_computed_from_data_is_masked():
    """while sum(acc) < 10 (at most 6 times): acc += x[i]; the exit iteration depends on the data."""
    extra = [helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
             _const("limit", np.float32(10)), helper.make_node("Less", ["total", "limit"], ["go_on"])]
    body = _loop_body(extra, condition="go_on")
    del body.output[2]  # no scan output: its length would depend on data
    nodes = [_const("trips", np.int64(6)), _const("true", np.array(True)),
             helper.make_node("Loop", ["trips", "true", "acc0"], ["acc"], body=body)]
    model = _model(nodes, [_value("acc0", F32, [3]), _value("x", F32, [6, 3])], [_value("acc", F32, [3])])
    rep = KilnBackend.prepare(model)
    x = np.abs(np.random.default_rng(2).standard_normal((6, 3))).astype(np.float32) * 2
    for start in (0.0, 3.0, 20.0):  # exits after several iterations, fewer, and after the first
        _assert_same(rep, model, {"acc0": np.full(3, start, np.float32), "x": x})
    assert len(rep._compiled) == 1


def test_loop_with_a_data_condition_gives_scan_outputs_of_data_dependent_length():
    """Every iteration up to M is compiled; the scan output comes padded with a bound the runtime trims by."""
    extra = [helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
             _const("limit", np.float32(10)), helper.make_node("Less", ["total", "limit"], ["go_on"])]
    nodes = [_const("trips", np.int64(6)), _const("true", np.array(True)),
             helper.make_node("Loop", ["trips", "true", "acc0"], ["acc", "history"],
                              body=_loop_body(extra, condition="go_on"))]
    model = _model(nodes, [_value("acc0", F32, [3]), _value("x", F32, [6, 3])],
                   [_value("acc", F32, [3]), _value("history", F32, ["trips", 3])])
    rep = KilnBackend.prepare(model)
    x = np.abs(np.random.default_rng(2).standard_normal((6, 3))).astype(np.float32) * 2
    for start in (0.0, 3.0, 20.0):  # several iterations, fewer, one
        _assert_same(rep, model, {"acc0": np.full(3, start, np.float32), "x": x})
    assert len(rep._compiled) == 1


def test_loop_beyond_the_unroll_cap_runs_at_run_time(monkeypatch):
    """Past the cap the body is compiled once and the entry loops (the graph holds one Loop node)."""
    monkeypatch.setattr(control_flow, "MAX_UNROLLED_NODES", 20)
    nodes = [_const("trips", np.int64(6)), _const("true", np.array(True)),
             helper.make_node("Loop", ["trips", "true", "acc0"], ["acc", "history"], body=_loop_body())]
    model = _model(nodes, [_value("acc0", F32, [3]), _value("x", F32, [6, 3])],
                   [_value("acc", F32, [3]), _value("history", F32, ["trips", 3])])
    assert [n.op for n in import_onnx(model).nodes].count("Loop") == 1
    rep = KilnBackend.prepare(model)
    x = np.random.default_rng(3).standard_normal((6, 3)).astype(np.float32)
    _assert_same(rep, model, {"acc0": np.ones(3, np.float32), "x": x})


def test_scan_with_reversed_inputs_and_outputs_on_other_axes():
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "a"], ["s_out"]), helper.make_node("Mul", ["s_out", "b"], ["y"])], "body",
        [_value("s_in", F32, [2]), _value("a", F32, [2]), _value("b", F32, [2])],
        [_value("s_out", F32, [2]), _value("y", F32, [2])])
    scan = helper.make_node("Scan", ["s0", "a", "b"], ["s", "ys"], body=body, num_scan_inputs=2,
                            scan_input_axes=[1, 0], scan_input_directions=[1, 0],
                            scan_output_axes=[-1], scan_output_directions=[1])
    model = _model([scan], [_value("s0", F32, [2]), _value("a", F32, [2, 4]), _value("b", F32, [4, 2])],
                   [_value("s", F32, [2]), _value("ys", F32, [2, 4])])
    rng = np.random.default_rng(3)
    feeds = {"s0": rng.standard_normal(2).astype(np.float32), "a": rng.standard_normal((2, 4)).astype(np.float32),
             "b": rng.standard_normal((4, 2)).astype(np.float32)}
    _assert_same(KilnBackend.prepare(model), model, feeds)


def test_if_nested_in_a_loop_body_is_inlined_per_iteration():
    """The body branches on the iteration number (known per unrolled iteration) and reads outer values."""
    then_branch = helper.make_graph([helper.make_node("Add", ["acc_in", "x"], ["t"])], "then", [], [_value("t", F32, [3])])
    else_branch = helper.make_graph([helper.make_node("Mul", ["acc_in", "x"], ["e"])], "else", [], [_value("e", F32, [3])])
    body = helper.make_graph(
        [_const("two", np.int64(2)), helper.make_node("Less", ["i", "two"], ["early"]),
         helper.make_node("If", ["early"], ["acc_out"], then_branch=then_branch, else_branch=else_branch),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [_value("i", I64, []), _value("cond_in", BOOL, []), _value("acc_in", F32, [3])],
        [_value("cond_out", BOOL, []), _value("acc_out", F32, [3])])
    nodes = [_const("trips", np.int64(4)), helper.make_node("Loop", ["trips", "", "acc0"], ["acc"], body=body)]
    model = _model(nodes, [_value("acc0", F32, [3]), _value("x", F32, [3])], [_value("acc", F32, [3])])
    rng = np.random.default_rng(4)
    feeds = {"acc0": rng.standard_normal(3).astype(np.float32), "x": rng.standard_normal(3).astype(np.float32)}
    _assert_same(KilnBackend.prepare(model), model, feeds)


def test_unsupported_ops_inside_bodies_are_listed_with_the_others():
    then_branch = helper.make_graph([helper.make_node("Frobnicate", ["x"], ["t"], domain="com.example")], "then", [],
                                    [_value("t", F32, [2])])
    else_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [], [_value("e", F32, [2])])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch),
             helper.make_node("Twiddle", ["y"], ["z"], domain="com.example")]
    graph = helper.make_graph(nodes, "m", [_value("c", BOOL, []), _value("x", F32, [2])], [_value("z", F32, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    expected = [("com.example", "Frobnicate", 1), ("com.example", "Twiddle", 1)]
    assert unsupported_ops(model) == expected
    with pytest.raises(UnsupportedOpError) as info:
        import_onnx(model)
    assert info.value.ops == expected


def test_a_while_loop_exported_with_an_unbounded_trip_count_stops_on_its_condition():
    """torch exports `while i < 3` as M = INT64_MAX and a condition on the iteration number."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "x"], ["acc_out"]), _const("three", np.int64(3)), _const("one", np.int64(1)),
         helper.make_node("Add", ["i", "one"], ["next_i"]), helper.make_node("Less", ["next_i", "three"], ["cond_out"])],
        "body", [_value("i", I64, []), _value("cond_in", BOOL, []), _value("acc_in", F32, [3])],
        [_value("cond_out", BOOL, []), _value("acc_out", F32, [3])])
    nodes = [_const("trips", np.iinfo(np.int64).max), _const("true", np.array(True)),
             helper.make_node("Loop", ["trips", "true", "acc0"], ["acc"], body=body)]
    model = _model(nodes, [_value("acc0", F32, [3]), _value("x", F32, [3])], [_value("acc", F32, [3])])
    rng = np.random.default_rng(5)
    feeds = {"acc0": rng.standard_normal(3).astype(np.float32), "x": rng.standard_normal(3).astype(np.float32)}
    _assert_same(KilnBackend.prepare(model), model, feeds)


def test_an_integer_setting_that_decides_an_if_is_specialized_and_a_float_threshold_is_not():
    """silero VAD branches on Equal(sr, 16000) into branches of different shapes: sr is compiled per value;
    a float threshold is data, so its If is selected at run time from one compiled model."""
    then_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [], [_value("t", F32, [4])])
    else_branch = helper.make_graph([_const("e", np.arange(2, dtype=np.float32))], "else", [], [_value("e", F32, [2])])
    nodes = [_const("wide", np.int64(16000)), helper.make_node("Equal", ["sr", "wide"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)]
    model = _model(nodes, [_value("sr", I64, []), _value("x", F32, [4])], [_value("y", F32, ["n"])])
    rep = KilnBackend.prepare(model)
    for sr in (16000, 8000):
        _assert_same(rep, model, {"sr": np.array(sr, np.int64), "x": np.arange(4, dtype=np.float32)})
    assert len(rep._compiled) == 2

    rep = KilnBackend.prepare(_data_if_model_with_threshold())
    for threshold in (-100.0, 100.0):
        feeds = {"x": np.ones((2, 3), np.float32), "w": np.ones(3, np.float32), "limit": np.array(threshold, np.float32)}
        _assert_same(rep, _data_if_model_with_threshold(), feeds)
    assert len(rep._compiled) == 1


def _data_if_model_with_threshold():
    model = _data_if_model()
    model.graph.node[1].CopyFrom(helper.make_node("Identity", ["limit"], ["zero"]))
    model.graph.input.append(_value("limit", F32, []))
    return model
