"""If and Loop at run time (core/frontend/converters/control_flow_runtime.py): each branch and loop body compiled
once as its own runner, the entry branching or looping; every case compared with ONNX Runtime."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import core
from core.errors import UnsupportedOpError
from core.frontend import import_onnx
from core.frontend.converters.control_flow_runtime import max_trip_count
from core.runtime.loader import KilnRuntimeError

from .test_frontend_control_flow import BOOL, F32, I64, _const, _value

pytestmark = pytest.mark.timeout(600)


def _model(nodes, inputs, outputs, initializers=()):
    model = helper.make_model(helper.make_graph(nodes, "m", inputs, outputs, list(initializers)),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _compare(module, model: bytes, feeds: dict, exact: bool = False) -> None:
    session = ort.InferenceSession(model)
    theirs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    ours = module.run(feeds)
    assert set(ours) == set(theirs)
    for name, expected in theirs.items():
        assert ours[name].shape == expected.shape and ours[name].dtype == expected.dtype, name
        if exact:
            np.testing.assert_array_equal(ours[name], expected)
        else:
            np.testing.assert_allclose(ours[name], expected, rtol=1e-5, atol=1e-5)


def _compile(model: bytes, **options):
    return core.compile(model, validate=False, benchmark=False, **options).load()


# -- If -------------------------------------------------------------------------------------------------------
def _if_model():
    """sum(x) > 0: y = x @ w (shape [2, 4]) with a capture of the outer w; else y = reshape(x, [6]) * 2 (shape [6]):
    the branches differ in rank and size; z (the same shape both ways) is a second output."""
    then_branch = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["t"]),
                                     helper.make_node("Relu", ["x"], ["tz"])], "then", [],
                                    [_value("t", F32, [2, 4]), _value("tz", F32, [2, 3])])
    else_branch = helper.make_graph([_const("flat", np.array([6], np.int64)), _const("two", np.float32(2)),
                                     helper.make_node("Reshape", ["x", "flat"], ["r"]),
                                     helper.make_node("Mul", ["r", "two"], ["e"]),
                                     helper.make_node("Neg", ["x"], ["ez"])], "else", [],
                                    [_value("e", F32, [6]), _value("ez", F32, [2, 3])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), _const("zero", np.float32(0)),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y", "z"], then_branch=then_branch, else_branch=else_branch)]
    w = onnx.numpy_helper.from_array(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32), "w")
    return _model(nodes, [_value("x", F32, [2, 3])], [_value("y", F32, ["n"]), _value("z", F32, [2, 3])], [w])


def test_if_runs_only_the_taken_branch_whose_output_shape_differs_from_the_other():
    model = _if_model()
    graph = import_onnx(model)
    (node,) = [n for n in graph.nodes if n.op == "If"]
    assert [g.name for g in node.attr("branches")] and "y::shape" in graph.outputs
    module = _compile(model)
    rng = np.random.default_rng(1)
    for sign in (1, -1):  # both conditions, one artifact
        x = (np.abs(rng.standard_normal((2, 3))) * sign).astype(np.float32)
        _compare(module, model, {"x": x})
        assert module.run({"x": x})["y"].shape == ((2, 4) if sign > 0 else (6,))


def _frames_if_model():
    then_branch = helper.make_graph([_const("two", np.float32(2)), helper.make_node("Mul", ["x", "two"], ["t"])],
                                    "then", [], [_value("t", F32, [4])])
    else_branch = helper.make_graph([_const("frames", np.array([-1, 3], np.int64)), _const("one", np.array([1])),
                                     helper.make_node("Reshape", ["x", "frames"], ["f"]),
                                     helper.make_node("ReduceSum", ["f", "one"], ["e"], keepdims=0)],
                                    "else", [], [_value("e", F32, None)])
    nodes = [helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0), _const("zero", np.float32(0)),
             helper.make_node("Greater", ["m", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)]
    return _model(nodes, [_value("x", F32, ["samples"])], [_value("y", F32, ["n"])])


def _nested_if_model():
    """If(a): [If(b): y = x @ w ([2, 4]) else y = reshape(x, [6]) * 2 ([6])], z = relu(x); else y = reshape(x,
    [1, 2, 3]) - 1 ([1, 2, 3]), z = -x. The then branch's y takes its shape from the nested If at run time, so the
    outer If's y has three shapes of three ranks."""
    inner = _if_model()  # its If on sum(x) > 0 becomes If(b) inside the outer then branch
    inner_if = onnx.load_from_string(inner).graph.node[-1]
    inner_if.input[0] = "b"
    inner_if.output[:] = ["yt", "zt"]
    then_branch = helper.make_graph([inner_if], "outer_then", [],
                                    [_value("yt", F32, ["n"]), _value("zt", F32, [2, 3])])
    else_branch = helper.make_graph([_const("cube", np.array([1, 2, 3], np.int64)), _const("one", np.float32(1)),
                                     helper.make_node("Reshape", ["x", "cube"], ["r3"]),
                                     helper.make_node("Sub", ["r3", "one"], ["ye"]),
                                     helper.make_node("Neg", ["x"], ["ze"])], "outer_else", [],
                                    [_value("ye", F32, [1, 2, 3]), _value("ze", F32, [2, 3])])
    w = onnx.load_from_string(inner).graph.initializer[0]
    nodes = [helper.make_node("If", ["a"], ["y", "z"], then_branch=then_branch, else_branch=else_branch)]
    return _model(nodes, [_value("x", F32, [2, 3]), _value("a", BOOL, []), _value("b", BOOL, [])],
                  [_value("y", F32, ["n"]), _value("z", F32, [2, 3])], [w])


def test_a_nested_if_inside_a_branch_gives_the_shape_of_the_outer_output_at_run_time():
    model = _nested_if_model()
    (node,) = [n for n in import_onnx(model).nodes if n.op == "If"]
    assert node.attr("given_shapes") == ((0,), ())  # the then branch gives y's shape itself
    module, rng = _compile(model), np.random.default_rng(3)
    for a, b, shape in ((True, True, (2, 4)), (True, False, (6,)), (False, True, (1, 2, 3)), (True, True, (2, 4))):
        feeds = {"x": rng.standard_normal((2, 3)).astype(np.float32), "a": np.array(a), "b": np.array(b)}
        _compare(module, model, feeds)
        assert module.run(feeds)["y"].shape == shape


def test_a_branch_that_does_not_fit_the_compiled_shapes_fails_only_when_taken():
    """silero VAD's pattern: the branch for the other sample rate cannot reshape this input; the taken one runs."""
    model = _frames_if_model()
    module = _compile(model, input_shapes={"x": (4,)})  # 4 samples: no frames of 3
    _compare(module, model, {"x": np.arange(1, 5, dtype=np.float32)})
    with pytest.raises(KilnRuntimeError, match="else branch was taken, but it does not compile"):
        module.run({"x": -np.arange(1, 5, dtype=np.float32)})


def test_an_output_whose_branches_differ_in_rank_cannot_feed_other_ops():
    """Branches differing along one axis feed later ops (test_frontend_control_flow_shapes.py); a rank that changes
    with the branch still only reaches a graph output."""
    then_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [], [_value("t", F32, [4])])
    else_branch = helper.make_graph([_const("e", np.zeros((2, 2), np.float32))], "else", [], [_value("e", F32, [2, 2])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), _const("zero", np.float32(0)),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch),
             helper.make_node("Relu", ["y"], ["out"])]
    model = _model(nodes, [_value("x", F32, [4])], [_value("out", F32, ["n"])])
    with pytest.raises(Exception, match="only a graph output may have a shape known only at run time"):
        import_onnx(model)


# -- Loop -----------------------------------------------------------------------------------------------------
def _loop_model(with_condition_input: bool = True):
    """acc' = acc / 2 + w * i (w from the outer scope) while i < M and sum(acc') < limit; scans acc' each step."""
    body = helper.make_graph([
        helper.make_node("Cast", ["i"], ["fi"], to=F32), helper.make_node("Mul", ["w", "fi"], ["wi"]),
        _const("half", np.float32(0.5)), helper.make_node("Mul", ["acc", "half"], ["ah"]),
        helper.make_node("Add", ["ah", "wi"], ["acc2"]), helper.make_node("ReduceSum", ["acc2"], ["s"], keepdims=0),
        helper.make_node("Less", ["s", "limit"], ["c2"]), helper.make_node("Identity", ["acc2"], ["scan"])],
        "body", [_value("i", I64, []), _value("c", BOOL, []), _value("acc", F32, [3])],
        [_value("c2", BOOL, []), _value("acc2", F32, [3]), _value("scan", F32, [3])])
    condition = "cond" if with_condition_input else ""
    nodes = [helper.make_node("Loop", ["M", condition, "acc0"], ["final", "history"], body=body)]
    inputs = [_value("M", I64, []), _value("acc0", F32, [3]), _value("w", F32, [3]), _value("limit", F32, [])]
    if with_condition_input:
        inputs.insert(1, _value("cond", BOOL, []))
    return _model(nodes, inputs, [_value("final", F32, [3]), _value("history", F32, ["n", 3])])


def test_a_loop_with_a_run_time_trip_count_and_early_exit_matches_onnxruntime():
    model = _loop_model()
    with max_trip_count(16):
        graph = import_onnx(model)
    assert [n.op for n in graph.nodes].count("Loop") == 1  # the body is compiled once, not unrolled
    module = _compile(model, max_trip_count=16)
    rng = np.random.default_rng(2)
    for trips, limit, go in ((5, 100.0, True), (12, 100.0, True), (12, 3.0, True), (0, 100.0, True),
                             (16, 1e9, True), (9, 100.0, False)):
        feeds = {"M": np.array(trips, np.int64), "cond": np.array(go), "acc0": rng.standard_normal(3).astype(np.float32),
                 "w": rng.standard_normal(3).astype(np.float32), "limit": np.array(limit, np.float32)}
        _compare(module, model, feeds)


def test_a_loop_past_its_trip_bound_stops_with_an_error():
    module = _compile(_loop_model(), max_trip_count=4)
    feeds = {"M": np.array(5, np.int64), "cond": np.array(True), "acc0": np.zeros(3, np.float32),
             "w": np.ones(3, np.float32), "limit": np.array(1e9, np.float32)}
    with pytest.raises(KilnRuntimeError, match="runs past 4 iterations"):
        module.run(feeds)
    feeds["M"] = np.array(4, np.int64)  # at the bound it runs, and the module is still usable after the error
    assert module.run(feeds)["history"].shape == (4, 3)


def test_a_loop_with_scan_outputs_and_no_known_trip_bound_is_refused_up_front():
    with pytest.raises(UnsupportedOpError, match="no maximum is declared.*--max-trip-count"):
        import_onnx(_loop_model())


def test_a_loop_without_scan_outputs_needs_no_bound_and_without_a_condition_input_stops_on_the_body_condition():
    """ONNX Runtime (the reference) ends such a loop when the body's condition output turns false, as Kiln does."""
    body = helper.make_graph([helper.make_node("Add", ["acc", "w"], ["acc2"]),
                              helper.make_node("ReduceMax", ["acc2"], ["top"], keepdims=0), _const("limit", np.float32(4)),
                              helper.make_node("Less", ["top", "limit"], ["go_on"])],
                             "body", [_value("i", I64, []), _value("c", BOOL, []), _value("acc", F32, [2, 2])],
                             [_value("go_on", BOOL, []), _value("acc2", F32, [2, 2])])
    nodes = [helper.make_node("Loop", ["M", "", "acc0"], ["final"], body=body)]
    model = _model(nodes, [_value("M", I64, []), _value("acc0", F32, [2, 2]), _value("w", F32, [2, 2])],
                   [_value("final", F32, [2, 2])])
    module = _compile(model)
    rng = np.random.default_rng(3)
    # M, the condition or never ends it; a million iterations (the entry's stack must not grow per iteration)
    for trips, step in ((0, 1.0), (1, 1.0), (3, 1.0), (300, 0.05), (300, -0.5), (1_000_000, 1e-6)):
        _compare(module, model, {"M": np.array(trips, np.int64), "acc0": rng.standard_normal((2, 2)).astype(np.float32),
                                 "w": np.full((2, 2), step, np.float32)})


# -- a greedy decoder: tokens grow by one per iteration, the loop exits early on an end token --------------------
def _greedy_decoder(vocab: int = 16, dim: int = 8):
    """tokens = start; for i < M: next = argmax(tanh(emb[tokens[:, -1]]) @ out); tokens = concat(tokens, next);
    stop after `eos`. Also scans each step's best score."""
    rng = np.random.default_rng(5)
    weights = [onnx.numpy_helper.from_array(rng.standard_normal((vocab, dim)).astype(np.float32), "emb"),
               onnx.numpy_helper.from_array(rng.standard_normal((dim, vocab)).astype(np.float32), "out")]
    body = helper.make_graph([
        _const("last", np.int64(-1)), helper.make_node("Gather", ["tokens", "last"], ["token"], axis=1),
        helper.make_node("Gather", ["emb", "token"], ["e"], axis=0), helper.make_node("Tanh", ["e"], ["h"]),
        helper.make_node("MatMul", ["h", "out"], ["logits"]),
        helper.make_node("ArgMax", ["logits"], ["next"], axis=-1, keepdims=1),
        helper.make_node("ReduceMax", ["logits"], ["score"], keepdims=0),
        helper.make_node("Concat", ["tokens", "next"], ["tokens2"], axis=1),
        helper.make_node("Squeeze", ["next"], ["next0"]), helper.make_node("Equal", ["next0", "eos"], ["stop"]),
        helper.make_node("Not", ["stop"], ["go_on"])],
        "body", [_value("i", I64, []), _value("c", BOOL, []), _value("tokens", I64, [1, "t"])],
        [_value("go_on", BOOL, []), _value("tokens2", I64, [1, "t2"]), _value("score", F32, [])])
    nodes = [helper.make_node("Loop", ["M", "", "start"], ["tokens_out", "scores"], body=body)]
    return _model(nodes, [_value("start", I64, [1, 1]), _value("M", I64, []), _value("eos", I64, [])],
                  [_value("tokens_out", I64, [1, "n"]), _value("scores", F32, ["m"])], weights)


def test_a_greedy_decoder_with_a_growing_concat_and_early_exit_matches_onnxruntime():
    model = _greedy_decoder()
    module = _compile(model, max_trip_count=24)
    session = ort.InferenceSession(model)
    stopped_early = 0
    for start in range(16):
        for trips in (0, 1, 7, 24):
            for eos in (3, 9):
                feeds = {"start": np.array([[start]], np.int64), "M": np.array(trips, np.int64),
                         "eos": np.array(eos, np.int64)}
                _compare(module, model, feeds)
                stopped_early += session.run(None, feeds)[0].shape[1] < trips + 1
    assert stopped_early > 0  # some sequences end on their end token before M


def test_a_growing_loop_value_without_a_declared_bound_is_refused_up_front():
    with pytest.raises(UnsupportedOpError, match="grows each iteration.*--max-trip-count"):
        import_onnx(_greedy_decoder())


def test_a_torch_jit_script_greedy_decoder_export_matches_onnxruntime():
    """data/greedy_decoder_jit_script.onnx (data/export_greedy_decoder.py): torch's own export of a scripted loop, a
    `while` with M = INT64_MAX, a condition from max_len, an If inside the body and tokens growing by a Concat."""
    path = Path(__file__).parent / "data" / "greedy_decoder_jit_script.onnx"
    model = path.read_bytes()
    module = _compile(model, max_trip_count=20)
    for start in range(16):
        for max_len in (0, 1, 5, 20):
            _compare(module, model, {"start": np.array([[start]], np.int64), "max_len": np.array(max_len, np.int64)})
    with pytest.raises(KilnRuntimeError, match="runs past 20 iterations"):
        module.run({"start": np.array([[0]], np.int64), "max_len": np.array(21, np.int64)})


# -- Scan -----------------------------------------------------------------------------------------------------
def test_a_scan_too_long_to_unroll_runs_at_run_time_with_reversed_inputs_and_outputs_on_other_axes(monkeypatch):
    """state' = tanh(state @ w + x_t) over x's axis 1 read backwards; outputs the states reversed, along axis 1."""
    from core.frontend.converters import control_flow

    monkeypatch.setattr(control_flow, "MAX_UNROLLED_NODES", 8)
    body = helper.make_graph([helper.make_node("MatMul", ["h", "w"], ["hw"]), helper.make_node("Add", ["hw", "xt"], ["a"]),
                              helper.make_node("Tanh", ["a"], ["h2"]), helper.make_node("Identity", ["h2"], ["y"])],
                             "body", [_value("h", F32, [4]), _value("xt", F32, [4])],
                             [_value("h2", F32, [4]), _value("y", F32, [4])])
    nodes = [helper.make_node("Scan", ["h0", "x"], ["hT", "ys"], body=body, num_scan_inputs=1, scan_input_axes=[1],
                              scan_input_directions=[1], scan_output_axes=[1], scan_output_directions=[1])]
    w = onnx.numpy_helper.from_array(np.random.default_rng(6).standard_normal((4, 4)).astype(np.float32) * 0.5, "w")
    model = _model(nodes, [_value("h0", F32, [4]), _value("x", F32, [4, 9])],
                   [_value("hT", F32, [4]), _value("ys", F32, [4, 9])], [w])
    assert [n.op for n in import_onnx(model).nodes].count("Loop") == 1
    module = _compile(model)
    rng = np.random.default_rng(7)
    for _ in range(3):
        _compare(module, model, {"h0": rng.standard_normal(4).astype(np.float32),
                                 "x": rng.standard_normal((4, 9)).astype(np.float32)})


SILERO = Path.home() / ".cache" / "kiln" / "real-models" / "silero_vad.onnx"


def _silero_stream(module, rng, rate: int, samples: int, chunks: int = 3) -> dict:
    """A stream of `chunks` chunks at `rate`, the state carried from chunk to chunk, each compared with ONNX Runtime;
    returns the last chunk's feeds."""
    model, state = SILERO.read_bytes(), np.zeros((2, 1, 128), np.float32)
    for _ in range(chunks):
        feeds = {"input": rng.standard_normal((1, samples)).astype(np.float32) * 0.1, "state": state,
                 "sr": np.array(rate, np.int64)}
        _compare(module, model, feeds)
        state = module.run(feeds)["stateN"]
    return feeds


@pytest.mark.skipif(not SILERO.exists(), reason="the silero VAD export is fetched by hand into ~/.cache/kiln/real-models")
@pytest.mark.parametrize("rate, samples", [(16000, 512), (8000, 256)])
def test_silero_vad_with_its_sample_rate_as_a_run_time_input(tmp_path, rate, samples):
    """Its If on sr == 16000 picks branches of different shapes. Compiled at the rate's own chunk (512 samples at
    16 kHz, 256 at 8 kHz), validated and benchmarked on real inputs (scalar sr included): streams match ONNX
    Runtime. At 256 samples both branches compile, so 16 kHz runs there too; at 512 the 8 kHz branch's LSTM gets a
    rank-5 input (in ONNX Runtime too): a clear error when taken."""
    rng = np.random.default_rng(9)
    path = tmp_path / "silero.npz"
    np.savez(path, input=rng.standard_normal((1, samples)).astype(np.float32) * 0.1,
             state=np.zeros((2, 1, 128), np.float32), sr=np.array(rate, np.int64))
    artifact = core.compile(SILERO, input_shapes={"input": (1, samples), "state": (2, 1, 128)},
                            validation_inputs=str(path))
    assert artifact.report["validation"]["max_abs_err"] < 1e-4
    assert artifact.report["latency_ms"]["kiln"] > 0  # benchmarked on the user's sample, not on a random sr
    module = artifact.load()
    for sr in ((rate,) if samples == 512 else (8000, 16000)):
        feeds = _silero_stream(module, rng, sr, samples)
    if samples == 512:
        with pytest.raises(KilnRuntimeError, match="else branch was taken, but it does not compile"):
            module.run({**feeds, "sr": np.array(8000, np.int64)})


@pytest.mark.skipif(not SILERO.exists(), reason="the silero VAD export is fetched by hand into ~/.cache/kiln/real-models")
def test_silero_vad_one_artifact_for_both_sample_rates(tmp_path):
    """input declared 1,256|512 (each chunk size a bucket): validated on a 16 kHz and an 8 kHz stream chunk, then
    streams at both rates match ONNX Runtime from the one artifact."""
    rng = np.random.default_rng(10)
    paths = []
    for rate, samples in ((16000, 512), (8000, 256)):
        paths.append(str(tmp_path / f"silero_{rate}.npz"))
        np.savez(paths[-1], input=rng.standard_normal((1, samples)).astype(np.float32) * 0.1,
                 state=np.zeros((2, 1, 128), np.float32), sr=np.array(rate, np.int64))
    artifact = core.compile(SILERO, input_shapes={"input": "1,256|512", "state": (2, 1, 128)},
                            validation_inputs=paths, benchmark=False)
    assert artifact.report["validation"]["samples"] == 2 and artifact.report["validation"]["max_abs_err"] < 1e-4
    module = artifact.load()
    for rate, samples in ((16000, 512), (8000, 256), (16000, 256)):
        _silero_stream(module, rng, rate, samples)
