"""core.quantize on a small onnx.helper CNN: calibration methods, per-channel weights, keep-float, sensitivity,
fallback, the accuracy numbers (recomputed here with ONNX Runtime), and the QDQ model compiled by Kiln."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from core.driver.reference import reference_session
from core.quantize import QuantizeOptions, quantize_model
from core.quantize.calibration import load_calibration, split_samples

from .models import INPUT, small_cnn, write_calibration, write_model


@pytest.fixture
def files(tmp_path):
    return write_model(tmp_path), write_calibration(tmp_path)


def _run(model_bytes: bytes, samples) -> np.ndarray:
    session = reference_session(model_bytes, 1)
    return np.stack([session.run(None, s)[0] for s in samples])


def _weight_dequantizers(model: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    """Conv/Gemm name -> the DequantizeLinear that feeds its weight (input 1), where one does."""
    producers = {out: node for node in model.graph.node for out in node.output}
    found = {}
    for node in model.graph.node:
        if node.op_type in ("Conv", "Gemm") and producers.get(node.input[1]) is not None:
            if producers[node.input[1]].op_type == "DequantizeLinear":
                found[node.name] = producers[node.input[1]]
    return found


def test_quantizes_every_layer_and_reports_the_accuracy_cost_on_held_back_samples(files):
    model_path, calibration = files
    result = quantize_model(model_path, calibration)
    q = onnx.load_from_string(result.model)
    assert set(_weight_dequantizers(q)) == {"conv1", "conv2", "fc"}
    report = result.report
    assert report["calibration"] == {"samples": 16, "held_back": 4}
    assert report["layers"] == {"quantizable": 3, "quantized": 3, "ops": report["layers"]["ops"]}
    # The reported errors are what ONNX Runtime gives on the held-back samples, float32 model against QDQ model.
    _, held_back = split_samples(load_calibration(calibration, onnx.load(str(model_path))))
    reference, quantized = _run(model_path.read_bytes(), held_back), _run(result.model, held_back)
    (out,) = report["accuracy"]["outputs"]
    assert out["name"] == "scores"
    assert out["max_abs_err"] == pytest.approx(float(np.abs(quantized - reference).max()), rel=1e-6)
    assert out["mean_abs_err"] == pytest.approx(float(np.abs(quantized - reference).mean()), rel=1e-6)
    rel = np.linalg.norm(quantized.astype(np.float64) - reference) / np.linalg.norm(reference.astype(np.float64))
    assert out["rel_err"] == pytest.approx(rel, rel=1e-6) and 0 < out["rel_err"] < 0.05
    agree = np.mean(reference.argmax(-1) == quantized.argmax(-1))
    assert out["top1_agreement"] == pytest.approx(agree) and out["top1_positions"] == 4
    assert report["fallback"] == [] and report["budget_met"] is None


@pytest.mark.parametrize("method", ["minmax", "percentile", "entropy"])
def test_each_calibration_method_gives_a_model_close_to_float32(files, method):
    result = quantize_model(*files, QuantizeOptions(method=method, sensitivity_layers=0))
    assert result.report["method"] == method
    assert result.report["accuracy"]["rel_err"] < 0.1
    assert result.report["sensitivity"]["layers"] == []


def test_per_channel_weights_have_one_scale_per_output_channel(files):
    per_tensor = onnx.load_from_string(quantize_model(*files, QuantizeOptions(sensitivity_layers=0)).model)
    per_channel = onnx.load_from_string(quantize_model(*files, QuantizeOptions(per_channel=True, sensitivity_layers=0)).model)
    inits = {t.name: numpy_helper.to_array(t) for t in per_channel.graph.initializer}
    dq = _weight_dequantizers(per_channel)["conv2"]
    assert inits[dq.input[1]].shape == (8,)  # one scale per output channel of conv2's [8, 8, 3, 3] weight
    tensor_inits = {t.name: numpy_helper.to_array(t) for t in per_tensor.graph.initializer}
    assert tensor_inits[_weight_dequantizers(per_tensor)["conv2"].input[1]].size == 1


def test_keep_float_leaves_the_named_layer_in_float32(files):
    result = quantize_model(*files, QuantizeOptions(keep_float=("fc",)))
    q = onnx.load_from_string(result.model)
    assert set(_weight_dequantizers(q)) == {"conv1", "conv2"}
    fc = next(n for n in q.graph.node if n.name == "fc")
    assert fc.input[1] == "w3"  # the float32 initializer itself
    assert result.report["keep_float"] == ["fc"] and result.report["layers"]["quantized"] == 2
    assert [s["layer"] for s in result.report["sensitivity"]["layers"]] != [] and \
        "fc" not in [s["layer"] for s in result.report["sensitivity"]["layers"]]


def test_sensitivity_is_each_layer_alone_in_int8_most_sensitive_first_and_capped(files):
    report = quantize_model(*files).report
    layers = report["sensitivity"]["layers"]
    assert {s["layer"] for s in layers} == {"conv1", "conv2", "fc"}
    assert [s["rel_err"] for s in layers] == sorted((s["rel_err"] for s in layers), reverse=True)
    assert all(s["rel_err"] > 0 for s in layers)
    # each alone costs less than all three together
    assert max(s["rel_err"] for s in layers) < report["accuracy"]["rel_err"]
    capped = quantize_model(*files, QuantizeOptions(sensitivity_layers=2)).report["sensitivity"]
    assert capped["measured"] == 2 and capped["candidates"] == 3 and "first 2 of 3" in capped["note"]


def test_fallback_moves_the_most_sensitive_layers_to_float32_until_the_budget_holds(files):
    full = quantize_model(*files).report
    order = [s["layer"] for s in full["sensitivity"]["layers"]]
    budget = full["accuracy"]["rel_err"] * 0.8  # below the all-int8 error: at least one layer must fall back
    report = quantize_model(*files, QuantizeOptions(max_error=budget)).report
    assert report["fallback"] and report["fallback"] == order[:len(report["fallback"])]
    steps = report["fallback_steps"]
    assert [s["layer"] for s in steps] == report["fallback"]
    assert report["accuracy"]["rel_err"] == pytest.approx(steps[-1]["rel_err"])
    assert report["budget_met"] is (report["accuracy"]["rel_err"] <= budget)
    # every step but the last was still over the budget (it stops at the first that holds)
    assert all(s["rel_err"] > budget for s in steps[:-1])
    assert report["accuracy"]["before_fallback"][0]["rel_err"] == pytest.approx(full["accuracy"]["rel_err"])
    generous = quantize_model(*files, QuantizeOptions(max_error=1.0)).report
    assert generous["fallback"] == [] and generous["budget_met"] is True


def test_unnamed_nodes_get_names_that_keep_float_accepts(tmp_path):
    model = write_model(tmp_path, small_cnn(named=False))
    result = quantize_model(model, write_calibration(tmp_path), QuantizeOptions(keep_float=("Conv_0",)))
    assert result.report["float_layers"] == ["Conv_0"]
    assert {s["layer"] for s in result.report["sensitivity"]["layers"]} == {"Conv_2", "Gemm_6"}


def test_the_qdq_model_compiles_and_matches_onnx_runtime_on_the_calibration_samples(files, tmp_path):
    import core

    result = quantize_model(*files, QuantizeOptions(per_channel=True, sensitivity_layers=0))
    qdq = tmp_path / "cnn_int8.onnx"
    qdq.write_bytes(result.model)
    artifact = core.compile(qdq, validation_inputs=[files[1]])
    try:
        validation = artifact.report["validation"]
        assert validation["passed"], validation
        with artifact.load() as module:
            sample = np.load(files[1])[INPUT][0]
            ours = module.run({INPUT: sample})["scores"]
        theirs = _run(result.model, [{INPUT: sample}])[0]
        assert np.abs(ours - theirs).max() <= 1e-4 + 1e-3 * np.abs(theirs).max()
    finally:
        artifact.cleanup()
