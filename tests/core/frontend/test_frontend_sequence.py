"""Sequence and optional ops compiled to native code through core.backend and compared with ONNX
Runtime: sequences are compile-time tuples of tensors, sequence inputs/outputs are flattened."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from core.onnx_backend.backend import KilnBackend
from core.errors import ShapeError, UnsupportedOpError

from .conftest import model_of_values as _model
from .conftest import run_ort

pytestmark = pytest.mark.timeout(300)
F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _tensor(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _sequence(name, elem, shape=None):
    return helper.make_value_info(name, helper.make_sequence_type_proto(helper.make_tensor_type_proto(elem, shape)))


def _optional_tensor(name, elem, shape):
    return helper.make_value_info(name, helper.make_optional_type_proto(helper.make_tensor_type_proto(elem, shape)))


def _assert_same(got, expected):
    if isinstance(expected, list):
        assert isinstance(got, list) and len(got) == len(expected)
        for g, e in zip(got, expected):
            _assert_same(g, e)
        return
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def _check(model, feeds, rep=None):
    rep = rep or KilnBackend.prepare(model)
    ours = rep.run(feeds)
    theirs = run_ort(model, feeds)
    assert len(ours) == len(theirs)
    for got, expected in zip(ours, theirs):
        _assert_same(got, expected)
    return rep


def test_split_index_and_restack_tensor_to_tensor():
    """SplitToSequence -> SequenceAt / SequenceErase / ConcatFromSequence(new_axis) inside one model."""
    nodes = [helper.make_node("SplitToSequence", ["x"], ["parts"], axis=1, keepdims=0),
             helper.make_node("Constant", [], ["minus_one"], value=helper.make_tensor("v", I64, [], [-1])),
             helper.make_node("SequenceAt", ["parts", "minus_one"], ["last"]),
             helper.make_node("SequenceErase", ["parts", "minus_one"], ["rest"]),
             helper.make_node("SequenceLength", ["rest"], ["count"]),
             helper.make_node("ConcatFromSequence", ["rest"], ["stacked"], axis=-1, new_axis=1)]
    model = _model(nodes, [_tensor("x", F32, [2, 4])],
                   [_tensor("last", F32, [2]), _tensor("count", I64, []), _tensor("stacked", F32, [2, 3])])
    _check(model, {"x": np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)})


def test_sequence_outputs_come_back_as_lists():
    nodes = [helper.make_node("SplitToSequence", ["x", "sizes"], ["parts"], axis=0),
             helper.make_node("SequenceInsert", ["parts", "y", "zero"], ["grown"]),
             helper.make_node("SequenceEmpty", [], ["empty"], dtype=F32)]
    model = _model([helper.make_node("Constant", [], ["sizes"], value=helper.make_tensor("s", I64, [2], [1, 3])),
                    helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("z", I64, [], [0])), *nodes],
                   [_tensor("x", F32, [4, 2]), _tensor("y", F32, [2, 2])],
                   [_sequence("grown", F32), _sequence("empty", F32)])
    rng = np.random.default_rng(1)
    _check(model, {"x": rng.standard_normal((4, 2)).astype(np.float32), "y": rng.standard_normal((2, 2)).astype(np.float32)})


def test_sequence_inputs_of_each_length_compile_once_per_structure():
    nodes = [helper.make_node("SequenceLength", ["seq"], ["n"]),
             helper.make_node("ConcatFromSequence", ["seq"], ["joined"], axis=0),
             helper.make_node("SequenceInsert", ["seq", "t", "at"], ["longer"])]
    model = _model(nodes, [_sequence("seq", F32, ["k"]), _tensor("t", F32, [2]), _tensor("at", I64, [])],
                   [_tensor("n", I64, []), _tensor("joined", F32, ["total"]), _sequence("longer", F32)])
    rng = np.random.default_rng(2)
    rep = None
    for lengths, at in (((3, 1), 1), ((2, 4, 1), 0), ((3, 1), -1)):
        seq = [rng.standard_normal(n).astype(np.float32) for n in lengths]
        rep = _check(model, {"seq": seq, "t": np.arange(2, dtype=np.float32), "at": np.array(at, np.int64)}, rep)
    assert len(rep._compiled) == 3  # two structures (and shapes), and a second position for the first one


def test_optional_input_present_or_empty():
    nodes = [helper.make_node("OptionalHasElement", ["maybe"], ["has"]),
             helper.make_node("If", ["has"], ["value"],
                              then_branch=helper.make_graph(
                                  [helper.make_node("OptionalGetElement", ["maybe"], ["got"])], "then", [],
                                  [_tensor("got", F32, [3])]),
                              else_branch=helper.make_graph(
                                  [helper.make_node("Constant", [], ["default"], value=helper.make_tensor(
                                      "d", F32, [3], [7, 8, 9]))], "else", [], [_tensor("default", F32, [3])]))]
    model = _model(nodes, [_optional_tensor("maybe", F32, [3])], [_tensor("has", TensorProto.BOOL, []),
                                                                  _tensor("value", F32, [3])], opset=18)
    rep = KilnBackend.prepare(model)
    for feeds in ({"maybe": np.array([1, 2, 3], np.float32)}, {"maybe": None}, {}):  # {}: left out, so empty
        ours = rep.run(feeds)
        present = feeds.get("maybe") is not None
        assert bool(ours[0]) is present
        _assert_same(ours[1], feeds["maybe"] if present else np.array([7, 8, 9], np.float32))


def test_a_position_computed_at_run_time_selects_among_same_shaped_elements():
    nodes = [helper.make_node("SplitToSequence", ["x"], ["parts"], axis=1),
             helper.make_node("ReduceMax", ["x"], ["column_sums"], axes=[0], keepdims=0),
             helper.make_node("ArgMax", ["column_sums"], ["where"], keepdims=0),
             helper.make_node("Neg", ["where"], ["from_the_end"]),  # a negative position counts from the end
             helper.make_node("SequenceAt", ["parts", "from_the_end"], ["y"])]
    model = _model(nodes, [_tensor("x", F32, [2, 4])], [_tensor("y", F32, [2, 1])])
    rep = KilnBackend.prepare(model)
    for seed in (1, 6, 0, 7):  # the largest column is 0, 1, 2 and 3
        _check(model, {"x": np.random.default_rng(seed).standard_normal((2, 4)).astype(np.float32)}, rep)
    assert len(rep._compiled) == 1  # x is data: selected at run time, not compiled per value


def test_a_position_computed_at_run_time_among_different_shapes_is_reported():
    nodes = [helper.make_node("Constant", [], ["sizes"], value=helper.make_tensor("s", I64, [2], [1, 2])),
             helper.make_node("SplitToSequence", ["x", "sizes"], ["parts"]),
             helper.make_node("ArgMax", ["x"], ["where"], keepdims=0),
             helper.make_node("SequenceAt", ["parts", "where"], ["y"])]
    model = _model(nodes, [_tensor("x", F32, [3])], [_tensor("y", F32, ["n"])])
    with pytest.raises(UnsupportedOpError, match="SequenceAt.*elements differ in shape"):
        KilnBackend.prepare(model)


def test_compile_validates_sequence_outputs_against_onnx_runtime():
    import core

    nodes = [helper.make_node("SplitToSequence", ["x"], ["parts"], axis=0, keepdims=0)]
    model = _model(nodes, [_tensor("x", F32, [3, 2])], [_sequence("parts", F32)])
    artifact = core.compile(model.SerializeToString(), "native", 1, None, benchmark=False)
    try:
        assert artifact.report["validation"]["max_abs_err"] == 0.0
        assert [o["name"] for o in artifact.metadata["outputs"]] == ["parts::0", "parts::1", "parts::2"]
    finally:
        artifact.cleanup()


def test_optional_outputs_come_back_as_the_value_or_none():
    tensor_type = helper.make_tensor_type_proto(F32, [2])
    then_branch = helper.make_graph([helper.make_node("Optional", ["x"], ["full"])], "then", [],
                                    [helper.make_value_info("full", helper.make_optional_type_proto(tensor_type))])
    else_branch = helper.make_graph([helper.make_node("Optional", [], ["empty"], type=tensor_type)], "else", [],
                                    [helper.make_value_info("empty", helper.make_optional_type_proto(tensor_type))])
    nodes = [helper.make_node("If", ["c"], ["maybe"], then_branch=then_branch, else_branch=else_branch)]
    model = _model(nodes, [_tensor("c", TensorProto.BOOL, []), _tensor("x", F32, [2])],
                   [_optional_tensor("maybe", F32, [2])], opset=18)
    rep = KilnBackend.prepare(model)
    x = np.array([1.5, -2], np.float32)
    for flag in (True, False):
        (ours,) = rep.run({"c": np.array(flag), "x": x})
        (theirs,) = run_ort(model, {"c": np.array(flag), "x": x})
        if flag:
            _assert_same(ours, theirs)
        else:
            assert ours is None and theirs is None


def test_a_sequence_input_fed_an_array_is_a_clear_error():
    model = _model([helper.make_node("SequenceLength", ["seq"], ["n"])], [_sequence("seq", F32, [2])],
                   [_tensor("n", I64, [])])
    with pytest.raises(ShapeError, match="input 'seq' is a sequence: feed a list of arrays"):
        KilnBackend.prepare(model).run([np.zeros(2, np.float32)])


def test_run_node_takes_and_gives_sequences_as_lists():
    from core.onnx_backend.backend import run_node

    parts = [np.arange(2, dtype=np.float32), np.arange(3, dtype=np.float32) + 5]
    (joined,) = run_node(helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0), [parts])
    _assert_same(joined, np.concatenate(parts))
    (split,) = run_node(helper.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0), [joined])
    _assert_same(split, list(joined))
