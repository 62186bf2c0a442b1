"""CUDA artifacts on a real NVIDIA GPU (skipped without one; CI has none): the hand-scheduled model
against numpy through the artifact's loader, per-kernel device times, several models and threads, and
a whole ONNX model compiled for cuda and validated against ONNX Runtime by the pipeline itself."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from core.runtime import load
from core.runtime.loader import cuda_device_count
from tests.core.runtime import cuda_models

pytestmark = pytest.mark.skipif(cuda_device_count() == 0, reason="needs an NVIDIA GPU and driver")


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    return cuda_models.build_artifact(tmp_path_factory.mktemp("cuda"), "cuda -arch=sm_80")


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((cuda_models.M, cuda_models.K)).astype("float32")


def test_hand_scheduled_model_matches_numpy(artifact):
    W, b = cuda_models.weights()
    with load(artifact) as m:
        for seed in (0, 1):  # a second run sees its own inputs
            x = _x(seed)
            got, want = m.run({"x": x}), cuda_models.reference(x, W, b)
            for name in want:
                np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-3)
        calls = m.profile(repeat=3)
    assert [c["name"] for c in calls] == ["scale_shift", "matmul", "bias_relu"]
    assert all(c["time_ms"] > 0 for c in calls)  # GPU event times, not the host's


def test_models_share_the_module_and_run_from_other_threads(artifact):
    x = _x(2)
    want = cuda_models.reference(x, *cuda_models.weights())["z"]
    first, second = load(artifact), load(artifact)
    out = {}
    worker = threading.Thread(target=lambda: out.update(second.run({"x": x})))
    worker.start()
    worker.join()
    np.testing.assert_allclose(out["z"], want, rtol=1e-4, atol=1e-3)
    second.close()  # the module stays loaded for the first model
    np.testing.assert_allclose(first.run({"x": x})["z"], want, rtol=1e-4, atol=1e-3)
    first.close()


def test_pipeline_validates_a_cuda_model_against_onnxruntime():
    import core

    artifact = core.compile(cuda_models.mlp_onnx(), target="cuda")
    report = artifact.report
    assert report["device"]["ran"] is True
    assert report["validation"]["passed"] is True and report["validation"]["max_abs_err"] < 1e-3
    assert report["latency_ms"]["kiln"] > 0
    assert all(k["time_ms"] and k["time_ms"] > 0 for k in report["kernels"])


def test_device_buffers_on_a_torch_stream_and_graphs_on_or_off(artifact, monkeypatch):
    """Module.run_device on torch's CUDA tensors, queued on a side stream, repeatedly (the CUDA graph replayed),
    matches numpy; with KILN_CUDA_GRAPH=0 (kernel by kernel) too."""
    torch = pytest.importorskip("torch")
    x = _x(3)
    want = cuda_models.reference(x, *cuda_models.weights())
    for graphs in ("1", "0"):
        monkeypatch.setenv("KILN_CUDA_GRAPH", graphs)
        with load(artifact) as m:
            outs = {o["name"]: torch.empty(o["shape"], device="cuda") for o in m.outputs}
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                feeds = {"x": torch.from_numpy(x).cuda()}
                for _ in range(3):
                    m.run_device(feeds, outs, stream)
            stream.synchronize()
            for name in want:
                np.testing.assert_allclose(outs[name].cpu().numpy(), want[name], rtol=1e-4, atol=1e-3)
            np.testing.assert_allclose(m.run({"x": x})["z"], want["z"], rtol=1e-4, atol=1e-3)
