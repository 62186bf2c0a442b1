"""The CUDA runtime's host side without a GPU: a stand-in libcuda.so.1 (fake_libcuda.c) keeps device memory
in host memory and runs the hand-scheduled model's kernels in C, so staging, argument offsets, launch
shapes, profiling, refcounted module/context lifetime and every error path are checked in CI.
Each case runs in a subprocess whose LD_LIBRARY_PATH finds the fake (the real driver is never touched)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
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


def build_fake_driver(folder: Path, *defines: str) -> Path:
    """fake_libcuda.c built as `folder`/libcuda.so.1 (`defines`: -DFAKE_... variants of the driver)."""
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", *defines, "-Wl,-soname,libcuda.so.1", "-o",
                    str(folder / "libcuda.so.1"), str(Path(__file__).with_name("fake_libcuda.c"))], check=True)
    return folder


@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory) -> Path:
    return build_fake_driver(tmp_path_factory.mktemp("fake_cuda"))


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
                     "failure); a GPU kernel faulted, which leaves CUDA unusable in this process: restart it"),
])
def test_driver_failures_are_one_clear_error(fake_driver, artifact, mode, message):
    result = run_child(fake_driver, artifact, mode)
    assert message in result.get("error", ""), result
    assert "second line" not in result["error"]


MAIN_C = r"""
#include <stdio.h>
#include <stdint.h>
#include "kiln_model.h"

int main(int argc, char** argv) {
    static KILN_INPUT_0_CTYPE x[KILN_INPUT_0_NUMEL];
    static KILN_OUTPUT_0_CTYPE y[KILN_OUTPUT_0_NUMEL];
    static KILN_OUTPUT_1_CTYPE z[KILN_OUTPUT_1_NUMEL];
    for (int i = 0; i < KILN_INPUT_0_NUMEL; i++) x[i] = (float)(i % 17) * 0.125f - 1.0f;
    kiln_model* m = kiln_load(argv[1]);
    if (!m) { printf("load failed: %s\n", kiln_last_error()); return 1; }
    /* RUN */
    for (int i = 0; i < KILN_OUTPUT_1_NUMEL; i++) printf("%.9g\n", z[i]);
    kiln_free(m);
    return 0;
}
"""
PROFILE_RUN = r"""
    const void* inputs[KILN_NUM_INPUTS] = {x};
    void* outputs[KILN_NUM_OUTPUTS] = {y, z};
    double ms[3];
    if (kiln_profile(m, inputs, outputs, ms) != 0) { printf("run failed: %s\n", kiln_last_error()); return 2; }
    printf("%s %d %g %g %g\n", KILN_CUDA_ARCH, kiln_num_kernel_calls(), ms[0], ms[1], ms[2]);
"""


def run_c_program(run: str, fake_driver: Path, artifact: Path, tmp_path: Path) -> list[str]:
    """MAIN_C with `run` as its run, built against the artifact alone (kiln_model.h, -lkiln_model) and run on
    the fake driver: the lines it prints after the run's own, output z checked against numpy."""
    art = tmp_path / "art"
    with tarfile.open(artifact) as tar:
        tar.extractall(art, filter="data")
    (tmp_path / "main.c").write_text(MAIN_C.replace("/* RUN */", run))
    exe = tmp_path / "main"
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-O1", f"-I{art}", str(tmp_path / "main.c"), f"-L{art}",
                    "-lkiln_model", f"-Wl,-rpath,{art}", "-o", str(exe)], check=True, capture_output=True)
    proc = subprocess.run([str(exe), str(art / "weights.bin")], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, LD_LIBRARY_PATH=str(fake_driver)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.split("\n")
    x = ((np.arange(cuda_models.M * cuda_models.K) % 17) * np.float32(0.125) - 1).astype("float32")
    want = cuda_models.reference(x.reshape(cuda_models.M, cuda_models.K), *cuda_models.weights())["z"]
    got = np.array([float(v) for v in lines[1:] if v.strip()], dtype="float32").reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    return lines[:1]


def test_a_c_program_runs_the_cuda_artifact(fake_driver, artifact, tmp_path):
    """The artifact from C alone: the README's usage, GPU timings included."""
    assert run_c_program(PROFILE_RUN, fake_driver, artifact, tmp_path) == ["sm_90 3 0.25 0.25 0.25"]


_PIPELINE_CHILD = r"""
import core
from core.errors import ValidationError
from tests.core.runtime import cuda_models
try:
    core.compile(cuda_models.mlp_onnx(), target="cuda -arch=sm_90")
    print("compiled without validating?!")
except ValidationError as err:
    print(f"ValidationError: {err}")
"""


def test_the_pipeline_validates_on_a_gpu_and_a_failing_run_fails_the_compile(fake_driver):
    # The fake driver sees a GPU, so the pipeline runs the artifact to validate it; it cannot execute the
    # pipeline's kernels (only the hand-scheduled ones), and that failure is the compile's one clear error.
    env = dict(os.environ, LD_LIBRARY_PATH=str(fake_driver), PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", _PIPELINE_CHILD], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().startswith("ValidationError: the compiled model failed on cuda while being validated: "
                                          "kiln_run failed: kiln_run: cuLaunchKernel(k000_"), proc.stdout
    assert "CUDA_ERROR_INVALID_VALUE" in proc.stdout


_GRAPH_CHILD = r"""
import ctypes, json, sys
import numpy as np
from core.runtime import loader
from tests.core.runtime import cuda_models

class Buffer:  # host memory the fake driver takes for device memory, as a GPU array library exposes it
    def __init__(self, array):
        self.array = array
        self.__cuda_array_interface__ = {"shape": array.shape, "typestr": array.dtype.str, "strides": None,
                                         "data": (array.ctypes.data, False), "version": 3}

fake = ctypes.CDLL("libcuda.so.1")
counters = lambda: {k: getattr(fake, f"fake_{k}")() for k in ("direct_launches", "graph_launches")}
result = {}
try:
    m = loader.load(sys.argv[1])
    x = np.random.default_rng(1).standard_normal((cuda_models.M, cuda_models.K)).astype("float32")
    want = cuda_models.reference(x, *cuda_models.weights())
    got = m.run({"x": x})
    result["err"] = max(float(np.abs(got[k] - want[k]).max()) for k in want)
    x2 = x[::-1].copy()
    want2, got2 = cuda_models.reference(x2, *cuda_models.weights()), m.run({"x": x2})
    result["err2"] = max(float(np.abs(got2[k] - want2[k]).max()) for k in want2)
    result["after_runs"] = counters()
    outs = {o["name"]: Buffer(np.zeros(o["shape"], "float32")) for o in m.outputs}
    try:
        m.run_device({"x": Buffer(x)}, outs, stream=0)
        result["device_err"] = max(float(np.abs(outs[k].array - want[k]).max()) for k in want)
    except loader.KilnRuntimeError as e:
        result["device_error"] = str(e)
    try:
        m.run_device({"x": Buffer(x[:, :8].copy())}, outs)
    except loader.KilnRuntimeError as e:
        result["shape_error"] = str(e)
    result["after_device"] = counters()
    m.close()
    result["live_streams"] = fake.fake_live_streams() if hasattr(fake, "fake_live_streams") else None
except Exception as e:
    result["error"] = f"{type(e).__name__}: {e}"
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def old_driver(tmp_path_factory) -> Path:
    """A driver without streams and graphs (CUDA before 11.4)."""
    return build_fake_driver(tmp_path_factory.mktemp("old_cuda"), "-DFAKE_NO_GRAPHS")


def run_graph_child(driver: Path, artifact: Path, **env) -> dict:
    env = {**os.environ, "LD_LIBRARY_PATH": str(driver), "PYTHONPATH": str(ROOT), "FAKE_CUDA_MODE": "", **env}
    proc = subprocess.run([sys.executable, "-c", _GRAPH_CHILD, str(artifact)], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "error" not in result, result
    assert result["err"] < 1e-4 and result["err2"] < 1e-4
    return result


def test_each_run_launches_the_model_as_one_cuda_graph_and_device_buffers_stay_on_the_device(fake_driver, artifact):
    """The first run captures the three launches into a graph; every run (host or device buffers) replays it."""
    result = run_graph_child(fake_driver, artifact)
    assert result["after_runs"] == {"direct_launches": 0, "graph_launches": 2}
    assert result["device_err"] < 1e-4 and result["after_device"] == {"direct_launches": 0, "graph_launches": 3}
    assert "'x' must be a C-contiguous GPU buffer (__cuda_array_interface__) of float32 [64, 128]" in \
        result["shape_error"]
    assert result["live_streams"] == 0  # the model's stream and graph go with it


@pytest.mark.parametrize("env", [{"KILN_CUDA_GRAPH": "0"}, {"FAKE_CUDA_MODE": "capture_fails"}],
                         ids=["graphs-off", "capture-refused"])
def test_without_a_graph_the_runs_launch_kernel_by_kernel(fake_driver, artifact, env):
    result = run_graph_child(fake_driver, artifact, **env)
    assert result["after_runs"] == {"direct_launches": 6, "graph_launches": 0}
    assert result["device_err"] < 1e-4 and result["after_device"]["graph_launches"] == 0


def test_a_driver_without_graphs_runs_host_buffers_and_refuses_device_ones_clearly(old_driver, artifact):
    result = run_graph_child(old_driver, artifact)
    assert result["after_runs"] == {"direct_launches": 6, "graph_launches": 0}
    assert "kiln_run_device failed: kiln_run_device: the CUDA driver lacks streams and graphs" in result["device_error"]


DEVICE_RUN = r"""
    /* the fake driver's device memory is host memory: these stand for cuMemAlloc'd buffers */
    const uint64_t inputs[KILN_NUM_INPUTS] = {(uint64_t)(uintptr_t)x};
    const uint64_t outputs[KILN_NUM_OUTPUTS] = {(uint64_t)(uintptr_t)y, (uint64_t)(uintptr_t)z};
    if (kiln_run_device(m, inputs, outputs, NULL) != 0) { printf("run failed: %s\n", kiln_last_error()); return 2; }
    const uint64_t missing[KILN_NUM_OUTPUTS] = {(uint64_t)(uintptr_t)y, 0};
    if (kiln_run_device(m, inputs, missing, NULL) == 0) { printf("a 0 output was taken\n"); return 3; }
    printf("%s\n", kiln_last_error());
"""


def test_a_c_program_runs_the_cuda_artifact_on_device_buffers(fake_driver, artifact, tmp_path):
    assert run_c_program(DEVICE_RUN, fake_driver, artifact, tmp_path) == ["kiln_run_device: output 1 is 0"]
