"""`kiln submit --precision int8 --calibration` against a live `kiln serve` (its embedded Celery worker): the job
quantizes, compiles and prints the accuracy cost; a bad calibration file is refused with exit 2."""
from __future__ import annotations

import numpy as np
import pytest

from core.runtime import load
from tests.core.quantize.models import INPUT, calibration_samples, write_calibration, write_model

from .test_submit import _one_line, submit

pytestmark = pytest.mark.slow  # starts `kiln serve` with its embedded worker


def test_submit_int8_reports_the_accuracy_cost_and_downloads_a_matching_artifact(live_service, tmp_path):
    import onnxruntime as ort

    model, calibration = write_model(tmp_path), write_calibration(tmp_path, count=10)
    out = tmp_path / "cnn_int8.tar.gz"
    proc = submit(live_service, model, "--precision", "int8", "--calibration", calibration, "--per-channel",
                  "--method", "entropy", "--op-types", "Conv", "Gemm", "--sensitivity-layers", "2", "--wait", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert "int8: 3 of 3 Conv/MatMul/Gemm layers quantized (entropy, per-channel weights, calibrated on 8 samples)" \
        in proc.stderr
    assert "accuracy on 2 held-back samples: scores: max abs" in proc.stderr and "top-1 agreement" in proc.stderr
    assert "note: sensitivity measured for the first 2 of 3 Conv/MatMul/Gemm layers" in proc.stderr
    # The artifact is the int8 model: close to the float32 model, not equal to it.
    feeds = {INPUT: calibration_samples(1, seed=5)[0]}
    with load(out) as module:
        ours = module.run(feeds)["scores"]
    theirs = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert 0 < np.abs(ours - theirs).max() < 0.1 * np.abs(theirs).max()


def test_submit_int8_with_bad_calibration_exits_2(live_service, tmp_path):
    model = write_model(tmp_path)
    np.savez(tmp_path / "wrong.npz", pixels=calibration_samples(4))
    proc = submit(live_service, model, "--precision", "int8", "--calibration", tmp_path / "wrong.npz", "--wait")
    assert proc.returncode == 2
    assert "missing input(s) 'image'" in _one_line(proc)
    proc = submit(live_service, model, "--precision", "int8", "--wait")
    assert proc.returncode == 2 and "needs --calibration" in _one_line(proc)
