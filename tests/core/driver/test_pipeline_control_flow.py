"""The pipeline with If run at run time on a branch chosen by an input (silero VAD's sample rate): validated and
benchmarked on the user's inputs, which take a branch the compiled shapes run (with declared ranges too: one
artifact, a bucket per rate); random ones that take a refused branch say so."""
from __future__ import annotations

import io
import re

import numpy as np
import onnx
import pytest
from onnx import helper

import core
from core.errors import ValidationInputError
from core.runtime.loader import KilnRuntimeError
from tests.core.frontend.test_frontend_control_flow import F32, I64, _const, _value
from tests.core.frontend.test_frontend_control_flow_runtime import _compare, _if_model, _model

pytestmark = pytest.mark.timeout(600)
RATES = {16000: 512, 8000: 256}  # sample rate -> the samples its branch takes, as silero VAD's


def _rate_model(else_shape=(1, 256)) -> bytes:
    """x[1, n], rate: If(rate == 16000) y = reshape(x, [2, 256]) @ w ([2, 4], fits n = 512 only), else
    y = reshape(x, [1, 256]) * 2 ([1, 256], fits n = 256 only): each compile runs one branch; level = max or min of
    x. (y keeps its rank both ways: a ranged library's buckets may not give an output different ranks.)"""
    then_branch = helper.make_graph([_const("frames_shape", np.array([2, 256], np.int64)),
                                     helper.make_node("Reshape", ["x", "frames_shape"], ["frames"]),
                                     helper.make_node("MatMul", ["frames", "w"], ["t"]),
                                     helper.make_node("ReduceMax", ["x"], ["tl"], keepdims=0)], "then", [],
                                    [_value("t", F32, [2, 4]), _value("tl", F32, [])])
    else_branch = helper.make_graph([_const("frame_shape", np.array(else_shape, np.int64)), _const("two", np.float32(2)),
                                     helper.make_node("Reshape", ["x", "frame_shape"], ["frame"]),
                                     helper.make_node("Mul", ["frame", "two"], ["e"]),
                                     helper.make_node("ReduceMin", ["x"], ["el"], keepdims=0)], "else", [],
                                    [_value("e", F32, list(else_shape)), _value("el", F32, [])])
    nodes = [_const("wideband", np.array(16000, np.int64)), helper.make_node("Equal", ["rate", "wideband"], ["c"]),
             helper.make_node("If", ["c"], ["y", "level"], then_branch=then_branch, else_branch=else_branch)]
    w = onnx.numpy_helper.from_array(np.random.default_rng(0).standard_normal((256, 4)).astype(np.float32), "w")
    return _model(nodes, [_value("x", F32, [1, "n"]), _value("rate", I64, [])],
                  [_value("y", F32, ["a", "b"]), _value("level", F32, [])], [w])


def _ranks_model() -> bytes:
    """_if_model's branches (y = x @ w, [2, 4], or reshape(x, [6]) * 2, [6]: both run at the compiled shapes, their
    outputs differing in shape and rank) chosen by rate == 16000 instead of sum(x) > 0."""
    model = onnx.load_from_string(_if_model())
    del model.graph.node[:3]  # ReduceSum, zero, Greater -> c
    model.graph.node.insert(0, _const("wideband", np.array(16000, np.int64)))
    model.graph.node.insert(1, helper.make_node("Equal", ["rate", "wideband"], ["c"]))
    model.graph.input.append(_value("rate", I64, []))
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _benchmarked(artifact) -> None:
    latency = artifact.report["latency_ms"]
    assert "skipped" not in latency and latency["kiln"] > 0 and latency["onnxruntime"] > 0
    assert artifact.report["validation"]["passed"] is True


@pytest.mark.parametrize("rate", sorted(RATES))
def test_the_benchmark_runs_the_users_inputs_which_take_the_branch_the_compiled_shapes_run(rate):
    """Random rates would take the other branch, refused at these shapes (the compile failed that way before)."""
    model, n = _rate_model(), RATES[rate]
    other = next(r for r in RATES if r != rate)
    rng = np.random.default_rng(rate)
    x = rng.standard_normal((1, n)).astype(np.float32)
    artifact = core.compile(model, input_shapes={"x": (1, n)}, validation_inputs=_npz(x=x, rate=np.array(rate)))
    _benchmarked(artifact)
    with artifact.load() as module:
        for _ in range(2):
            _compare(module, model, {"x": rng.standard_normal((1, n)).astype(np.float32), "rate": np.array(rate)})
        taken = "then" if other == 16000 else "else"
        with pytest.raises(KilnRuntimeError, match=f"the {taken} branch was taken, but it does not compile"):
            module.run({"x": x, "rate": np.array(other)})


def test_random_inputs_that_take_the_refused_branch_skip_the_benchmark_or_fail_the_validation_saying_why():
    """Without the user's inputs a random rate takes the else branch, which does not fit 512 samples (nor in ONNX
    Runtime): an unvalidated compile keeps its artifact and says why it was not timed."""
    model = _rate_model()
    artifact = core.compile(model, input_shapes={"x": (1, 512)}, validate=False)
    assert re.search("seeded random inputs took a path .*else branch was taken.*--validation-inputs",
                     artifact.report["latency_ms"]["skipped"])
    with pytest.raises(ValidationInputError, match="cannot run the model on these validation inputs.*--validation-inputs"):
        core.compile(model, input_shapes={"x": (1, 512)}, benchmark=False)


def test_branches_of_other_shapes_and_ranks_are_validated_on_both_and_benchmarked_on_the_first_sample():
    model, rng = _ranks_model(), np.random.default_rng(2)
    samples = _npz(x=rng.standard_normal((2, 2, 3)).astype(np.float32), rate=np.array([16000, 8000]))
    artifact = core.compile(model, validation_inputs=samples)
    _benchmarked(artifact)
    assert artifact.report["validation"]["samples"] == 2
    with artifact.load() as module:
        for rate, shape in ((16000, (2, 4)), (8000, (6,)), (16000, (2, 4))):  # one artifact, both ways, and back
            feeds = {"x": rng.standard_normal((2, 3)).astype(np.float32), "rate": np.array(rate)}
            _compare(module, model, feeds)
            assert module.run(feeds)["y"].shape == shape


def test_one_artifact_for_both_rates_is_validated_on_the_users_samples_at_their_own_sizes():
    """x declared 1,256|512: each size a bucket with its own branches, validated on one user sample per rate (with
    ranges, validation inputs were refused before: changed on purpose) and benchmarked on the first."""
    model, rng = _rate_model(), np.random.default_rng(4)
    samples = [_npz(x=rng.standard_normal((1, n)).astype(np.float32), rate=np.array(rate)) for rate, n in RATES.items()]
    artifact = core.compile(model, input_shapes={"x": "1,256|512"}, validation_inputs=samples)
    _benchmarked(artifact)
    assert artifact.report["validation"]["samples"] == 2
    assert artifact.report["latency_ms"]["shapes"]["x"] == [1, 512]
    with artifact.load() as module:
        for rate, n in (*RATES.items(), (16000, 512)):
            _compare(module, model, {"x": rng.standard_normal((1, n)).astype(np.float32), "rate": np.array(rate)})
        with pytest.raises(KilnRuntimeError, match="then branch was taken, but it does not compile"):
            module.run({"x": rng.standard_normal((1, 256)).astype(np.float32), "rate": np.array(16000)})


def test_a_users_sample_outside_the_declared_range_is_refused_before_the_build():
    samples = _npz(x=np.zeros((1, 128), np.float32), rate=np.array(8000))
    with pytest.raises(ValidationInputError, match="input 'x' has shape \\[1, 128\\], outside its declared range"):
        core.compile(_rate_model(), input_shapes={"x": "1,256|512"}, validation_inputs=samples)


def test_ranges_whose_buckets_give_an_output_different_ranks_are_refused_with_the_reason():
    """The else branch's y is [256] (rank 1), the then branch's [2, 4]: the bucket at n = 256 runs one, the bucket at
    512 the other, so y's rank depends on the size; the shaped tables hold one rank per output (a wrong shape came
    back before, caught only by validation)."""
    model, rng = _rate_model(else_shape=(256,)), np.random.default_rng(5)
    samples = [_npz(x=rng.standard_normal((1, n)).astype(np.float32), rate=np.array(rate)) for rate, n in RATES.items()]
    with pytest.raises(core.errors.ShapeError, match="output 'y' has rank 1 at .*but rank 2 at the largest shapes"):
        core.compile(model, input_shapes={"x": "1,256|512"}, validation_inputs=samples)
    artifact = core.compile(model, input_shapes={"x": (1, 256)}, validation_inputs=samples[1])  # one size: fine
    with artifact.load() as module:
        _compare(module, model, {"x": rng.standard_normal((1, 256)).astype(np.float32), "rate": np.array(8000)})
