"""Losses and softmax-derived ops (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss, Hardmax), Dropout's
mask and BatchNormalization in training mode, compiled to native code (KilnBackend) and compared with
ONNX Runtime, or with ONNX's reference evaluator where ONNX Runtime has no kernel."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from core.onnx_backend.backend import KilnBackend
from core.errors import UnsupportedOpError

F32 = "float32"
I64 = "int64"


def _compiled(model, feeds: dict) -> list[np.ndarray]:
    return list(KilnBackend.prepare(model).run([feeds[i.name] for i in model.graph.input]))


def _assert_close(got: list[np.ndarray], expected: list[np.ndarray], atol: float = 1e-5) -> None:
    assert len(got) == len(expected)
    for ours, theirs in zip(got, expected):
        assert ours.shape == np.shape(theirs) and ours.dtype == np.asarray(theirs).dtype
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=atol)


def _targets(rng, shape, classes, ignore_index=None) -> np.ndarray:
    target = rng.integers(0, classes, shape).astype(np.int64)
    if ignore_index is not None:
        target.reshape(-1)[::3] = ignore_index  # every third entry ignored, whatever the layout
    return target


# (reduction, weighted, ignore_index, scores shape): weights, masks and N-d inputs in each reduction
_NLL_CASES = [("none", False, None, (3, 5)), ("sum", True, None, (2, 4, 3)), ("mean", False, None, (2, 3, 2, 2)),
              ("mean", True, 1, (3, 4, 5)), ("mean", False, 2, (2, 3, 4)), ("none", True, 0, (2, 3, 2, 3))]


@pytest.mark.parametrize("reduction,weighted,ignore_index,shape", _NLL_CASES)
def test_negative_log_likelihood_loss_matches_ort(reduction, weighted, ignore_index, shape, onnx_model, ort_runner):
    rng = np.random.default_rng(0)
    attrs = {"reduction": reduction} if ignore_index is None else {"reduction": reduction, "ignore_index": ignore_index}
    inputs = ["x", "target", "weight"] if weighted else ["x", "target"]
    node = helper.make_node("NegativeLogLikelihoodLoss", inputs, ["loss"], **attrs)
    types = {"x": (F32, list(shape)), "target": (I64, [shape[0], *shape[2:]]), "weight": (F32, [shape[1]])}
    model = onnx_model([node], {n: types[n] for n in inputs}, {"loss": F32}, opset=13)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32),
             "target": _targets(rng, (shape[0], *shape[2:]), shape[1], ignore_index),
             "weight": rng.uniform(0.2, 2.0, shape[1]).astype(np.float32)}
    feeds = {n: feeds[n] for n in inputs}
    _assert_close(_compiled(model, feeds), ort_runner(model, feeds))


@pytest.mark.parametrize("ignore_index", [-7, 9])
def test_ignore_index_outside_the_classes_is_masked_not_read(ignore_index, onnx_model):
    # ONNX Runtime rejects such targets; the ONNX reference implementation defines the result.
    rng = np.random.default_rng(1)
    node = helper.make_node("NegativeLogLikelihoodLoss", ["x", "target", "weight"], ["loss"], reduction="mean",
                            ignore_index=ignore_index)
    model = onnx_model([node], {"x": (F32, [3, 4, 2]), "target": (I64, [3, 2]), "weight": (F32, [4])},
                       {"loss": F32}, opset=13)
    feeds = {"x": rng.standard_normal((3, 4, 2)).astype(np.float32),
             "target": _targets(rng, (3, 2), 4, ignore_index), "weight": rng.uniform(0.2, 2.0, 4).astype(np.float32)}
    _assert_close(_compiled(model, feeds), ReferenceEvaluator(model).run(None, feeds))


@pytest.mark.parametrize("reduction,weighted,ignore_index,shape",
                         [("mean", True, 1, (3, 4, 2)), ("none", False, None, (2, 5)), ("sum", False, 0, (2, 3, 2, 2))])
def test_softmax_cross_entropy_loss_and_log_prob_match_ort(reduction, weighted, ignore_index, shape, onnx_model,
                                                            ort_runner):
    rng = np.random.default_rng(2)
    attrs = {"reduction": reduction} if ignore_index is None else {"reduction": reduction, "ignore_index": ignore_index}
    inputs = ["scores", "labels", "weight"] if weighted else ["scores", "labels"]
    node = helper.make_node("SoftmaxCrossEntropyLoss", inputs, ["loss", "log_prob"], **attrs)
    types = {"scores": (F32, list(shape)), "labels": (I64, [shape[0], *shape[2:]]), "weight": (F32, [shape[1]])}
    model = onnx_model([node], {n: types[n] for n in inputs}, {"loss": F32, "log_prob": F32}, opset=13)
    feeds = {"scores": rng.standard_normal(shape).astype(np.float32) * 3,
             "labels": _targets(rng, (shape[0], *shape[2:]), shape[1], ignore_index),
             "weight": rng.uniform(0.2, 2.0, shape[1]).astype(np.float32)}
    feeds = {n: feeds[n] for n in inputs}
    _assert_close(_compiled(model, feeds), ort_runner(model, feeds))


def test_bad_reduction_is_a_shape_error(onnx_model):
    node = helper.make_node("NegativeLogLikelihoodLoss", ["x", "target"], ["loss"], reduction="max")
    model = onnx_model([node], {"x": (F32, [2, 3]), "target": (I64, [2])}, {"loss": (F32, [])}, opset=13)
    with pytest.raises(Exception, match="reduction must be one of none, sum, mean"):
        KilnBackend.prepare(model)


@pytest.mark.parametrize("opset,axis,shape", [(13, -1, (2, 3, 4)), (13, 0, (3, 4)), (13, 1, (2, 4, 3)),
                                              (11, 1, (2, 3, 4))])
def test_hardmax_picks_the_first_maximum(opset, axis, shape, onnx_model, ort_runner):
    node = helper.make_node("Hardmax", ["x"], ["y"], axis=axis)
    model = onnx_model([node], {"x": (F32, list(shape))}, {"y": F32}, opset=opset)
    # Few distinct values: many rows tie for the maximum, and the first one must win.
    x = np.random.default_rng(3).integers(0, 3, shape).astype(np.float32)
    _assert_close(_compiled(model, {"x": x}), ort_runner(model, {"x": x}))


@pytest.mark.parametrize("training_inputs", [[], ["ratio", "training"]])
def test_dropout_mask_is_all_true_when_nothing_is_dropped(training_inputs, onnx_model):
    # Inference mode, or training mode with ratio 0: the output is x and the mask keeps everything.
    node = helper.make_node("Dropout", ["x", *training_inputs], ["y", "mask"], seed=0)
    initializers = {"ratio": np.float32(0.0), "training": np.bool_(True)} if training_inputs else {}
    model = onnx_model([node], {"x": (F32, [2, 3, 4])}, {"y": F32, "mask": "bool"}, initializers=initializers)
    x = np.random.default_rng(4).standard_normal((2, 3, 4)).astype(np.float32)
    y, mask = _compiled(model, {"x": x})
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.bool_ and mask.shape == x.shape and mask.all()


def test_dropout_that_drops_in_training_mode_is_unsupported(onnx_model):
    node = helper.make_node("Dropout", ["x", "ratio", "training"], ["y"], seed=0)
    model = onnx_model([node], {"x": (F32, [2, 3])}, {"y": F32},
                       initializers={"ratio": np.float32(0.5), "training": np.bool_(True)})
    with pytest.raises(UnsupportedOpError, match="Dropout in training mode with ratio > 0"):
        KilnBackend.prepare(model)


@pytest.mark.parametrize("shape,epsilon,momentum", [((2, 3, 4, 5), 1e-5, 0.9), ((4, 2), 1e-2, 0.7)])
def test_batch_norm_training_mode_updates_running_statistics(shape, epsilon, momentum, onnx_model):
    rng = np.random.default_rng(5)
    node = helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"],
                            ["y", "running_mean", "running_var"], epsilon=epsilon, momentum=momentum,
                            training_mode=1)
    c = shape[1]
    model = onnx_model([node], {"x": (F32, list(shape)), **{n: (F32, [c]) for n in ("scale", "bias", "mean", "var")}},
                       {"y": F32, "running_mean": F32, "running_var": F32}, opset=15)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32), "scale": rng.standard_normal(c).astype(np.float32),
             "bias": rng.standard_normal(c).astype(np.float32), "mean": rng.standard_normal(c).astype(np.float32),
             "var": rng.uniform(0.2, 2.0, c).astype(np.float32)}
    _assert_close(_compiled(model, feeds), ReferenceEvaluator(model).run(None, feeds), atol=1e-4)
