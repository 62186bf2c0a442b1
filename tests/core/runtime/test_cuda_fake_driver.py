"""The CUDA runtime's host side without a GPU: a stand-in libcuda.so.1 (fake_libcuda.c) keeps device memory
in host memory and runs the hand-scheduled model's kernels in C, so staging, argument offsets, launch
shapes, profiling, refcounted module/context lifetime and every error path are checked in CI.
Each case runs in a subprocess whose LD_LIBRARY_PATH finds the fake (the real driver is never touched)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.core.runtime import cuda_models

ROOT = Path(__file__).resolve().parents[3]

_CHILD = r"""
import ctypes, json, sys
import numpy as np
from core.runtime import loader
from tests.core.runtime import cuda_models
result = {"devices": loader.cuda_device_count()}
try:
    m = loader.load(sys.argv[1])
    x = np.random.default_rng(0).standard_normal((cuda_models.M, cuda_models.K)).astype("float32")
    want = cuda_models.reference(x, *cuda_models.weights())
    result["err"] = max(float(np.abs(m.run({"x": x})[k] - want[k]).max()) for k in want)
    x2 = x[::-1].copy()  # a second run sees new inputs, not the first run's staging
    want2 = cuda_models.reference(x2, *cuda_models.weights())
    result["err2"] = max(float(np.abs(m.run({"x": x2})[k] - want2[k]).max()) for k in want2)
    result["profile"] = m.profile(repeat=2)
    other = loader.load(sys.argv[1])
    other.close()
    result["err_after_other_closed"] = float(np.abs(m.run({"x": x})["z"] - want["z"]).max())
    m.close()
    result["live_allocations"] = ctypes.CDLL("libcuda.so.1").fake_live_allocations()
except Exception as e:
    result["error"] = f"{type(e).__name__}: {e}"
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fake_cuda")
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-Wl,-soname,libcuda.so.1", "-o", str(folder / "libcuda.so.1"),
                    str(Path(__file__).with_name("fake_libcuda.c"))], check=True)
    return folder


@pytest.fixture(scope="module")
def artifact(tmp_path_factory) -> Path:
    return cuda_models.build_artifact(tmp_path_factory.mktemp("cuda"), "cuda -arch=sm_90")


def run_child(fake_driver: Path, artifact: Path, mode: str = "") -> dict:
    env = dict(os.environ, LD_LIBRARY_PATH=str(fake_driver), FAKE_CUDA_MODE=mode, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(artifact)], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_runs_the_model_through_the_driver_api(fake_driver, artifact):
    result = run_child(fake_driver, artifact)
    assert "error" not in result, result
    assert result["devices"] == 1
    assert result["err"] < 1e-4 and result["err2"] < 1e-4 and result["err_after_other_closed"] < 1e-4
    assert [(c["name"], c["time_ms"]) for c in result["profile"]] == [("scale_shift", 0.25), ("matmul", 0.25),
                                                                      ("bias_relu", 0.25)]
    assert result["live_allocations"] == 0  # every model's weights and arena freed


@pytest.mark.parametrize("mode,message", [
    ("nodevice", "kiln_load: this model runs on an NVIDIA GPU (sm_90), but the CUDA driver finds none on this machine"),
    ("old_gpu", "compiled for sm_90 (compute capability 9.0 or newer), but GPU 0 (Fake GPU) is 7.0; compile it for "
                "-arch=sm_70"),
    ("bad_ptx", "cuModuleLoadDataEx (JIT-compiling the model's PTX for sm_90) failed: CUDA_ERROR_INVALID_PTX (fake "
                "error): ptxas fatal   : fake rejection"),
    ("launch_fails", "kiln_run: cuLaunchKernel(matmul, call 1) failed: CUDA_ERROR_LAUNCH_FAILED (unspecified launch "
                     "failure)"),
])
def test_driver_failures_are_one_clear_error(fake_driver, artifact, mode, message):
    result = run_child(fake_driver, artifact, mode)
    assert message in result.get("error", ""), result
    assert "second line" not in result["error"]
