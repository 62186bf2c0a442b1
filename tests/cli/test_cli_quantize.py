"""`kiln quantize`: writes the QDQ model and prints its accuracy cost; bad input is one line and exit 2."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort

from tests.cli.test_cli import assert_one_line_error, kiln
from tests.core.quantize.models import INPUT, calibration_samples, write_calibration, write_model


def test_quantize_writes_the_qdq_model_and_prints_the_accuracy_cost(tmp_path):
    model, calibration = write_model(tmp_path), write_calibration(tmp_path)
    out, report = tmp_path / "cnn_int8.onnx", tmp_path / "q.json"
    proc = kiln("quantize", model, "--calibration", calibration, "--per-channel", "--method", "percentile",
                "--keep-float", "fc", "--max-error", "0.5", "--report", report, "-o", out)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"wrote {out}")
    assert "int8: 2 of 3 Conv/MatMul/Gemm layers quantized (percentile, per-channel weights, calibrated on 16 samples)" in lines
    section = json.loads(report.read_text())
    (acc,) = section["accuracy"]["outputs"]
    assert (f"accuracy on 4 held-back samples: scores: max abs {acc['max_abs_err']:.3g}, mean abs "
            f"{acc['mean_abs_err']:.3g}, relative {acc['rel_err']:.3g}, top-1 agreement "
            f"{acc['top1_agreement']:.2%} of 4") in lines
    assert "float32 by request: fc" in lines and section["budget_met"] is True
    q = onnx.load(str(out))
    assert {"QuantizeLinear", "DequantizeLinear"} <= {n.op_type for n in q.graph.node}
    feeds = {INPUT: calibration_samples(1, seed=7)[0]}
    ours = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    theirs = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert np.abs(ours - theirs).max() < 0.1 * np.abs(theirs).max()


def test_bad_calibration_already_quantized_unknown_layer_and_not_onnx_are_one_line_each(tmp_path):
    model, calibration = write_model(tmp_path), write_calibration(tmp_path)
    np.savez(tmp_path / "empty.npz")
    np.savez(tmp_path / "wrong.npz", pixels=calibration_samples(4))
    for data, needle in [("empty.npz", "calibration data empty.npz is empty"),
                         ("wrong.npz", "missing input(s) 'image'; unknown name(s) 'pixels'")]:
        proc = kiln("quantize", model, "--calibration", tmp_path / data, "-o", tmp_path / "x.onnx")
        assert_one_line_error(proc, needle)
        assert proc.returncode == 2
    qdq = tmp_path / "qdq.onnx"
    assert kiln("quantize", model, "--calibration", calibration, "--sensitivity-layers", "0", "-o", qdq).returncode == 0
    proc = kiln("quantize", qdq, "--calibration", calibration, "-o", tmp_path / "x.onnx")
    assert_one_line_error(proc, "already quantized")
    assert proc.returncode == 2
    proc = kiln("quantize", model, "--calibration", calibration, "--keep-float", "conv9", "-o", tmp_path / "x.onnx")
    assert_one_line_error(proc, "--keep-float names no node of the model: 'conv9'")
    assert proc.returncode == 2
    assert_one_line_error(kiln("quantize", model, "--calibration", calibration, "--max-error", "-1", "-o", "x.onnx"),
                          "--max-error")
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a protobuf \x00\xff" * 8)
    proc = kiln("quantize", garbage, "--calibration", calibration, "-o", tmp_path / "x.onnx")
    assert_one_line_error(proc, "not an ONNX model")
    assert proc.returncode == 2
    assert not (tmp_path / "x.onnx").exists()
