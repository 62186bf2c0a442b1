"""`kiln submit -t rpi5 --wait` against a live `kiln serve`: the worker cross-compiles, validates the artifact
under qemu-aarch64 and says so in the report; the artifact itself, run under the emulator, matches ONNX Runtime."""
from __future__ import annotations

import json
import tarfile

import numpy as np
import pytest

from core.backends import get_backend
from core.driver.validate import onnxruntime_session
from core.runtime.emulated import EMULATED
from core.target import get_target
from tests.conftest import tiny_model

from .test_submit import submit

pytestmark = pytest.mark.slow  # starts `kiln serve` with its embedded worker


def test_submit_for_rpi5_returns_an_artifact_validated_under_emulation(live_service, tmp_path):
    model = tmp_path / "tiny.onnx"
    model.write_bytes(tiny_model(seed=4))
    out = tmp_path / "tiny-rpi5.tar.gz"
    proc = submit(live_service, model, "-t", "rpi5", "--wait", "-o", out)
    assert proc.returncode == 0, proc.stderr
    with tarfile.open(out) as tar:
        tar.extractall(tmp_path / "art", filter="data")
    report = json.loads((tmp_path / "art" / "report.json").read_text())
    assert report["target"] == "rpi5"
    assert report["validation"]["passed"] and report["validation"]["mode"] == EMULATED
    assert report["latency_ms"] == {"skipped": EMULATED}

    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    target = get_target("rpi5")
    with get_backend(target).emulator(target).load(tmp_path / "art") as module:
        got = module.run({"x": x})["y"]
    want = onnxruntime_session(model.read_bytes(), 1).run(["y"], {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
