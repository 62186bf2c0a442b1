"""`kiln compile --input-shape x=1..4,...`: one artifact that `kiln run` feeds any batch in range; bad ranges
and shapes outside them are one clear line and a non-zero exit."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from tests.core.driver.dynamic_models import small_cnn

from .test_cli import assert_one_line_error, kiln


@pytest.mark.parametrize("spec,needles", [
    ("x=0..0,3,8,8", ["'x'", "positive"]), ("x=4..1,3,8,8", ["above its high end"]),
    ("x=1..4,1..3,8,8", ["'x'", "dim 1 is fixed to 3"]), ("x=1..4,3,8", ["rank 3"]),
])
def test_bad_ranges_are_refused_in_one_line(tmp_path, spec, needles):
    model = tmp_path / "cnn.onnx"
    model.write_bytes(small_cnn())
    proc = kiln("compile", model, "--input-shape", spec, "-o", tmp_path / "o.tar.gz")
    assert_one_line_error(proc, *needles)
    assert not (tmp_path / "o.tar.gz").exists()


def test_one_artifact_runs_every_batch_in_range(tmp_path):
    model = tmp_path / "cnn.onnx"
    model.write_bytes(small_cnn())
    out = tmp_path / "cnn.tar.gz"
    proc = kiln("compile", model, "--input-shape", "x=1..4,3,8,8", "-o", out)
    assert proc.returncode == 0, proc.stderr
    x = np.random.default_rng(0).standard_normal((3, 3, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    run = kiln("run", out, "--input", f"x={tmp_path / 'x.npy'}", "--save", tmp_path / "outs")
    assert run.returncode == 0, run.stderr
    assert "y: float32[3, 5]" in run.stdout
    expected = ort.InferenceSession(model.read_bytes()).run(None, {"x": x})[0]
    np.testing.assert_allclose(np.load(tmp_path / "outs" / "y.npy"), expected, rtol=1e-4, atol=1e-6)
    np.save(tmp_path / "big.npy", np.zeros((5, 3, 8, 8), np.float32))
    outside = kiln("run", out, "--input", f"x={tmp_path / 'big.npy'}")
    assert_one_line_error(outside, "is 5, outside the declared range 1..4")
