"""If outputs whose branches differ along one axis, read by later ops (core/frontend/converters/control_flow_runtime.py):
bounded values whose length the taken branch gives at run time; in the graph, inside a Loop body, nested in an If.
Every case compared with ONNX Runtime on both branches from one artifact."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import core
from core.errors import UnsupportedOpError
from core.frontend import import_onnx
from core.frontend.converters.control_flow_runtime import max_trip_count

from .test_frontend_control_flow import BOOL, F32, I64, _const, _value
from .test_frontend_control_flow_runtime import _compare, _compile, _model

pytestmark = pytest.mark.timeout(600)
SMALL = np.array([[1, 2, 3], [4, 5, 6]], np.float32)  # the then branch's [2, 3]
LARGE = np.arange(15, dtype=np.float32).reshape(5, 3) / 10  # the else branch's [5, 3]


def _branches(reads: str, axis: int, tag: str = ""):
    """then: SMALL * reads ([2, 3]), else: LARGE - reads ([5, 3]); both transposed when `axis` is 1."""
    small, large = (SMALL, LARGE) if axis == 0 else (SMALL.T.copy(), LARGE.T.copy())
    then_branch = helper.make_graph([_const(f"small{tag}", small), helper.make_node("Mul", [reads, f"small{tag}"],
                                                                                     [f"t{tag}"])],
                                    f"then{tag}", [], [_value(f"t{tag}", F32, list(small.shape))])
    else_branch = helper.make_graph([_const(f"large{tag}", large), helper.make_node("Sub", [f"large{tag}", reads],
                                                                                     [f"e{tag}"])],
                                    f"else{tag}", [], [_value(f"e{tag}", F32, list(large.shape))])
    return then_branch, else_branch


def _differing_if_model(axis: int) -> bytes:
    """y = If(c) ([2, 3] or [5, 3] along axis 0; [3, 2] or [3, 5] along axis 1) feeding an Add, a MatMul over its
    other axis, a ReduceSum over all of it and a Softmax along the axis that differs; y itself an output too."""
    then_branch, else_branch = _branches("x", axis)
    w = np.random.default_rng(0).standard_normal((3, 4) if axis == 0 else (4, 3)).astype(np.float32)
    side = [1, 3] if axis == 0 else [3, 1]
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch),
             helper.make_node("Add", ["y", "b"], ["s"]),
             helper.make_node("MatMul", ["s", "w"] if axis == 0 else ["w", "s"], ["product"]),
             helper.make_node("Relu", ["product"], ["out"]),
             helper.make_node("ReduceSum", ["y"], ["total"], keepdims=0),
             helper.make_node("Softmax", ["y"], ["weights"], axis=axis)]
    dims = ["n", 3] if axis == 0 else [3, "n"]
    return _model(nodes, [_value("c", BOOL, []), _value("x", F32, side), _value("b", F32, side)],
                  [_value("out", F32, ["n", 4] if axis == 0 else [4, "n"]), _value("total", F32, []),
                   _value("weights", F32, dims), _value("y", F32, dims)],
                  [onnx.numpy_helper.from_array(w, "w")])


@pytest.mark.parametrize("axis", [0, 1])
def test_an_if_output_whose_branches_differ_along_one_axis_feeds_later_ops(axis):
    """Changed on purpose: such an output was refused unless it was a graph output. Along axis 1 the taken branch
    writes its [3, 2] padded to the [3, 5] slot (a bounded value's layout)."""
    model = _differing_if_model(axis)
    graph = import_onnx(model)
    (node,) = [n for n in graph.nodes if n.op == "If"]
    assert node.attr("paired") == ((0, axis, (2, 5)),) and node.attr("shaped") == ()
    assert "y::bound" in graph.outputs and "y::shape" not in graph.outputs
    module, rng = _compile(model), np.random.default_rng(1)
    side = (1, 3) if axis == 0 else (3, 1)
    for taken in (True, False, True):
        feeds = {"c": np.array(taken), "x": rng.standard_normal(side).astype(np.float32),
                 "b": rng.standard_normal(side).astype(np.float32)}
        _compare(module, model, feeds)
        assert module.run(feeds)["y"].shape[axis] == (2 if taken else 5)


def test_a_loop_body_with_an_if_whose_branches_differ_in_shape():
    """Changed on purpose (was refused): acc' = acc + 0.1 * sum(If(i even) SMALL * acc else LARGE - acc, axis 0),
    scanning max(that If's output); the loop runs M times (M at run time), the branch alternating."""
    then_branch, else_branch = _branches("acc", 0)
    body = helper.make_graph([
        _const("two", np.int64(2)), _const("zero", np.int64(0)), helper.make_node("Mod", ["i", "two"], ["parity"]),
        helper.make_node("Equal", ["parity", "zero"], ["even"]),
        helper.make_node("If", ["even"], ["y"], then_branch=then_branch, else_branch=else_branch),
        _const("rows", np.array([0], np.int64)), helper.make_node("ReduceSum", ["y", "rows"], ["column"], keepdims=0),
        _const("tenth", np.float32(0.1)), helper.make_node("Mul", ["column", "tenth"], ["step"]),
        helper.make_node("Add", ["acc", "step"], ["acc2"]), helper.make_node("ReduceMax", ["y"], ["top"], keepdims=0),
        helper.make_node("Identity", ["c"], ["go_on"])],
        "body", [_value("i", I64, []), _value("c", BOOL, []), _value("acc", F32, [3])],
        [_value("go_on", BOOL, []), _value("acc2", F32, [3]), _value("top", F32, [])])
    model = _model([helper.make_node("Loop", ["M", "", "acc0"], ["final", "tops"], body=body)],
                   [_value("M", I64, []), _value("acc0", F32, [3])], [_value("final", F32, [3]), _value("tops", F32, ["k"])])
    module, rng = _compile(model, max_trip_count=8), np.random.default_rng(2)
    for trips in (0, 1, 4, 7):
        _compare(module, model, {"M": np.array(trips, np.int64), "acc0": rng.standard_normal(3).astype(np.float32)})


def test_a_loop_body_passing_such_an_if_output_out_as_a_scan_output_is_refused_with_the_reason():
    """Still refused: scan outputs (and loop-carried values) of a length varying per iteration."""
    then_branch, else_branch = _branches("acc", 0)
    body = helper.make_graph([
        helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch),
        _const("rows", np.array([0], np.int64)), helper.make_node("ReduceSum", ["y", "rows"], ["acc2"], keepdims=0),
        helper.make_node("Identity", ["c"], ["go_on"])],
        "body", [_value("i", I64, []), _value("c", BOOL, []), _value("acc", F32, [3])],
        [_value("go_on", BOOL, []), _value("acc2", F32, [3]), _value("y", F32, ["k", 3])])
    model = _model([helper.make_node("Loop", ["M", "", "acc0"], ["final", "ys"], body=body)],
                   [_value("M", I64, []), _value("acc0", F32, [3])],
                   [_value("final", F32, [3]), _value("ys", F32, ["t", "k", 3])])
    with max_trip_count(8), pytest.raises(UnsupportedOpError, match="Loop node 'final': the loop body gives outputs "
                                                                    "that .* have run-time lengths"):
        import_onnx(model)


def test_a_nested_if_gives_the_outer_branch_output_its_length_at_run_time():
    """If(a): [If(b): [2, 3] else [5, 3]] else [4, 3]: the outer then branch gives y's length itself (its `::bound`
    output); y feeds a ReduceSum and a Softmax across the axis that differs."""
    inner_then, inner_else = _branches("x", 0, "_inner")
    outer_then = helper.make_graph([helper.make_node("If", ["b"], ["yt"], then_branch=inner_then,
                                                     else_branch=inner_else)], "outer_then", [],
                                   [_value("yt", F32, ["n", 3])])
    outer_else = helper.make_graph([_const("middle", -np.arange(12, dtype=np.float32).reshape(4, 3)),
                                    helper.make_node("Add", ["middle", "x"], ["ye"])], "outer_else", [],
                                   [_value("ye", F32, [4, 3])])
    nodes = [helper.make_node("If", ["a"], ["y"], then_branch=outer_then, else_branch=outer_else),
             _const("rows", np.array([0], np.int64)), helper.make_node("ReduceSum", ["y", "rows"], ["total"], keepdims=0),
             helper.make_node("Softmax", ["y"], ["weights"], axis=0)]
    model = _model(nodes, [_value("a", BOOL, []), _value("b", BOOL, []), _value("x", F32, [1, 3])],
                   [_value("y", F32, ["n", 3]), _value("total", F32, [3]), _value("weights", F32, ["n", 3])])
    (node,) = [n for n in import_onnx(model).nodes if n.op == "If"]
    assert node.attr("given_lengths") == ((0,), ()) and node.attr("paired") == ((0, 0, (None, 4)),)
    module, rng = _compile(model), np.random.default_rng(3)
    for a, b, rows in ((True, True, 2), (True, False, 5), (False, True, 4), (True, True, 2)):
        feeds = {"a": np.array(a), "b": np.array(b), "x": rng.standard_normal((1, 3)).astype(np.float32)}
        _compare(module, model, feeds)
        assert module.run(feeds)["y"].shape == (rows, 3)


def test_a_branch_whose_output_has_a_data_dependent_length_runs_alone_and_gives_that_length():
    """then: x[x > 0] (NonZero: a run-time length), else: an empty [0] (the "no boxes" pattern). Only the taken
    branch runs (both used to be inlined and selected by a Where); its length reaches a Mul and a ReduceSum."""
    then_branch = helper.make_graph([
        _const("zero", np.float32(0)), helper.make_node("Greater", ["x", "zero"], ["keep"]),
        helper.make_node("NonZero", ["keep"], ["where"]), _const("first", np.array([0], np.int64)),
        helper.make_node("Squeeze", ["where", "first"], ["index"]), helper.make_node("Gather", ["x", "index"], ["kept"])],
        "then", [], [_value("kept", F32, ["k"])])
    else_branch = helper.make_graph([_const("nothing", np.zeros(0, np.float32))], "else", [], [_value("nothing", F32, [0])])
    nodes = [helper.make_node("If", ["c"], ["picked"], then_branch=then_branch, else_branch=else_branch),
             _const("three", np.float32(3)), helper.make_node("Mul", ["picked", "three"], ["scaled"]),
             helper.make_node("ReduceSum", ["picked"], ["total"], keepdims=0)]
    model = _model(nodes, [_value("x", F32, [8]), _value("c", BOOL, [])],
                   [_value("scaled", F32, ["k"]), _value("total", F32, [])])
    (node,) = [n for n in import_onnx(model).nodes if n.op == "If"]
    assert node.attr("given_lengths") == ((0,), ()) and node.attr("paired") == ((0, 0, (None, 0)),)
    module, rng = _compile(model), np.random.default_rng(4)
    for taken in (True, False, True):
        for x in (rng.standard_normal(8).astype(np.float32), -np.ones(8, np.float32), np.ones(8, np.float32)):
            _compare(module, model, {"x": x, "c": np.array(taken)})


def _rows_if_model() -> bytes:
    """x [3, n] (n ranged): y = If(c) x[:2] ([2, n]) else concat(x, x[:2]) ([5, n]); a ReduceSum and a Softmax
    across y's rows, the axis that differs; n stays in place in both branches."""
    def rows(tag):
        return [_const(f"start{tag}", np.array([0], np.int64)), _const(f"stop{tag}", np.array([2], np.int64)),
                helper.make_node("Slice", ["x", f"start{tag}", f"stop{tag}", f"start{tag}"], [f"top{tag}"])]
    then_branch = helper.make_graph(rows("_t"), "then", [], [_value("top_t", F32, [2, "n"])])
    else_branch = helper.make_graph([*rows("_e"), helper.make_node("Concat", ["x", "top_e"], ["e"], axis=0)], "else",
                                    [], [_value("e", F32, [5, "n"])])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch),
             _const("rows", np.array([0], np.int64)), helper.make_node("ReduceSum", ["y", "rows"], ["total"], keepdims=0),
             helper.make_node("Softmax", ["y"], ["weights"], axis=0)]
    return _model(nodes, [_value("x", F32, [3, "n"]), _value("c", BOOL, [])],
                  [_value("total", F32, ["n"]), _value("weights", F32, ["k", "n"])])


def test_a_ranged_dimension_is_padded_through_an_if_output_whose_rows_differ():
    """Compiled for n in 1..8 (buckets 1, 2, 4, 8): n is padded through the If, its length along the other axis, so
    sizes between buckets run too."""
    model = _rows_if_model()
    artifact = core.compile(model, input_shapes={"x": "3,1..8"}, benchmark=False)
    assert artifact.report["validation"]["passed"] is True
    assert artifact.metadata["dynamic_shapes"]["variables"][0]["padded"] is True
    module, rng = artifact.load(), np.random.default_rng(5)
    for n in (1, 3, 5, 8):
        for taken in (True, False):
            _compare(module, model, {"x": rng.standard_normal((3, n)).astype(np.float32), "c": np.array(taken)})
