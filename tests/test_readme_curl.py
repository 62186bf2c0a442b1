"""The README's curl recipe, run verbatim with bash against a live `kiln serve`: it works, and it shows errors."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from core.runtime import load
from tests.conftest import tiny_model

ROOT = Path(__file__).resolve().parents[1]


def recipe() -> str:
    text = (ROOT / "README.md").read_text()
    found = re.search(r"# <kiln-curl-recipe>\n(.*?)# </kiln-curl-recipe>\n", text, re.S)
    assert found, "README.md lost its curl recipe markers"
    return found.group(1)


def _run(service, model: Path, folder: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "KILN_URL": service.url, "KILN_TOKEN": service.token, "MODEL_FILE": str(model)}
    return subprocess.run(["bash", "-c", recipe()], cwd=folder, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_curl_recipe_compiles_downloads_and_cleans_up(live_service, tmp_path):
    data = tiny_model(seed=7)
    model = tmp_path / "tiny.onnx"
    model.write_bytes(data)
    result = _run(live_service, model, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "event: end" in result.stdout and '"status": "succeeded"' in result.stdout
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    got = load(tmp_path / "model.tar.gz").run({"x": x})["y"]
    expected = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    assert "<html" in (tmp_path / "report.html").read_text().lower()


@pytest.mark.slow
def test_the_curl_recipe_shows_the_servers_error(live_service, tmp_path):
    model = tmp_path / "sampling.onnx"
    model.write_bytes(tiny_model(op="Bernoulli"))  # random sampling: Kiln refuses it
    result = _run(live_service, model, tmp_path)
    assert '"code":"unsupported_op"' in result.stdout and "Bernoulli" in result.stdout  # the 422 body, shown
    assert "error: unsupported ONNX ops: Bernoulli (opset 17)" in result.stderr
    assert "Traceback" not in result.stderr
