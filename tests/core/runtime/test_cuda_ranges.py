"""Input-shape ranges on cuda without a GPU: the pipeline's own kernels compiled for cuda, run by the fake driver
from a CPU build of the same kernels (fake_libcuda.c's FAKE_CUDA_KERNELS), so the compile validates every bucket and
the sizes between them against ONNX Runtime through kiln_cuda.c's per-bucket tables, and the artifact runs shapes in
range (host padding, run-time lengths staged on the device, a CUDA graph per bucket) like a CPU one."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import core
from tests.core.runtime.test_cuda_fake_driver import build_fake_driver

ROOT = Path(__file__).resolve().parents[3]

_COMPILE = r"""
import os
from core.backends.cuda import CudaBackend
from core.codegen.build import build_cpu_library
from core.target import get_target

cuda_build = CudaBackend.build_library

def build_with_cpu_kernels(self, funcs, target, out_path, plan=None):
    # the fake driver runs each launched kernel from this CPU build of the same PrimFuncs (by name)
    build_cpu_library(list(funcs), get_target("native"), os.environ["FAKE_CUDA_KERNELS"])
    return cuda_build(self, funcs, target, out_path, plan)

CudaBackend.build_library = build_with_cpu_kernels
"""

_BUFFER = r"""
class Buffer:  # host memory the fake driver takes for device memory, as a GPU array library exposes it
    def __init__(self, array):
        self.array = array  # an empty one at address 0, as torch gives it
        self.__cuda_array_interface__ = {"shape": array.shape, "typestr": array.dtype.str, "strides": None,
                                         "data": (array.ctypes.data if array.size else 0, False), "version": 3}
"""

_ENCODER_CHILD = _COMPILE + _BUFFER + r"""
import ctypes, json, sys
import numpy as np
import onnxruntime as ort
import core
from core.runtime.loader import KilnRuntimeError
from tests.core.driver.dynamic_models import tiny_encoder


model = tiny_encoder()
art = core.compile(model, target="cuda -arch=sm_90", input_shapes={"input_ids": "1..4,1..16"}, benchmark=False)
result = {"validation": {k: art.report["validation"].get(k) for k in ("passed", "max_abs_err", "shapes", "skipped")},
          "buckets": art.metadata["dynamic_shapes"]["buckets"], "shapes": {}}
session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
rng = np.random.default_rng(1)
fake = ctypes.CDLL("libcuda.so.1")
with art.load() as m:
    for shape in [(2, 7), (3, 11), (1, 16), (4, 3), (1, 1)]:
        ids = rng.integers(0, 50, shape).astype(np.int64)
        got, want = m.run({"input_ids": ids})["hidden"], session.run(None, {"input_ids": ids})[0]
        result["shapes"][str(shape)] = {"shape": list(got.shape), "err": float(np.abs(got - want).max())}
    try:
        m.run({"input_ids": np.zeros((1, 17), np.int64)})
    except KilnRuntimeError as e:
        result["out_of_range"] = str(e)
    result["device"] = {}
    for shape in [(4, 16), (2, 7), (3, 16), (1, 1)]:  # padded and cut on the device: one copy per padded row at most
        ids = rng.integers(0, 50, shape).astype(np.int64)
        (out_shape,) = m.output_shapes([shape])
        out = Buffer(np.full(out_shape, np.nan, np.float32))
        m.run_device({"input_ids": Buffer(ids)}, {"hidden": out})
        result["device"][str(shape)] = {"shape": list(out_shape),
                                        "err": float(np.abs(out.array - session.run(None, {"input_ids": ids})[0]).max())}
    try:
        m.run_device({"input_ids": Buffer(np.zeros((2, 7), np.int64))}, {"hidden": Buffer(np.zeros((4, 16, 16), np.float32))})
    except KilnRuntimeError as e:
        result["device_wrong_output"] = str(e)
    result["profiled_calls"] = len(m.profile(repeat=1))
result["launches"] = {"direct": fake.fake_direct_launches(), "graphs": fake.fake_graph_launches()}
print(json.dumps(result))
"""

_DECODER_CHILD = _COMPILE + _BUFFER + r"""
import json
import numpy as np
import onnxruntime as ort
import core
from tests.core.driver.dynamic_models import greedy_tokens, tiny_decoder

model = tiny_decoder()
art = core.compile(model, target="cuda", input_shapes={"input_ids": "1,1..8:1|8", "past_key_values.0.key":
                                                        "1,2,0..40:40,4"}, benchmark=False)
session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
names = [o.name for o in session.get_outputs()]
prompt = [3, 1, 4, 1, 5]
expected, reference = greedy_tokens(lambda feeds: dict(zip(names, session.run(None, feeds))), prompt, steps=12)


def on_device(m):
    def run(feeds):  # device buffers of any shape in range, the outputs at the shapes the library gives
        shapes = m.output_shapes([feeds[t["name"]].shape for t in m.inputs])
        outs = {t["name"]: Buffer(np.zeros(s, t["dtype"])) for t, s in zip(m.outputs, shapes)}
        m.run_device({k: Buffer(np.ascontiguousarray(v)) for k, v in feeds.items()}, outs)
        return {k: b.array for k, b in outs.items()}
    return run


result = {"passed": art.report["validation"].get("passed"), "expected": expected}
with art.load() as m:
    for how, run in (("host", m.run), ("device", on_device(m))):
        tokens, outputs = greedy_tokens(run, prompt, steps=12)
        result[how] = {"tokens": tokens, "err": max(float(np.abs(got[n] - ref[n]).max()) for got, ref in
                                                    zip(outputs, reference) for n in ref),
                       "shapes_match": all(got[n].shape == ref[n].shape for got, ref in zip(outputs, reference)
                                           for n in ref)}
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory) -> Path:
    return build_fake_driver(tmp_path_factory.mktemp("fake_cuda"))


def run_child(script: str, fake_driver: Path, tmp_path: Path, **env) -> dict:
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake_driver), "FAKE_CUDA_MODE": "", "PYTHONPATH": str(ROOT),
           "FAKE_CUDA_KERNELS": str(tmp_path / "cpu_kernels.so"), **env}
    proc = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_ranged_cuda_encoder_validates_and_runs_shapes_in_range_through_the_driver(fake_driver, tmp_path):
    result = run_child(_ENCODER_CHILD, fake_driver, tmp_path)
    validation = result["validation"]
    assert validation["passed"] is True and validation["max_abs_err"] < 1e-4, validation
    # every compiled shape and the sizes between them ran on the (fake) GPU during the compile
    assert len(result["buckets"]) > 1 and len(validation["shapes"]) > len(result["buckets"])
    for shape, got in result["shapes"].items():
        batch, seq = json.loads(shape.replace("(", "[").replace(")", "]"))
        assert got["shape"] == [batch, seq, 16] and got["err"] < 1e-4, (shape, got)
    assert "dim 1 (seq) is 17, outside the declared range 1..16" in result["out_of_range"]
    for shape, got in result["device"].items():
        batch, seq = json.loads(shape.replace("(", "[").replace(")", "]"))
        assert got["shape"] == [batch, seq, 16] and got["err"] < 1e-4, (shape, got)
    assert "'hidden' must be a C-contiguous GPU buffer (__cuda_array_interface__) of float32 [2, 7, 16]" in \
        result["device_wrong_output"]
    assert result["profiled_calls"] > 0
    assert result["launches"]["graphs"] > 0  # each bucket's launches replayed as its own CUDA graph


def test_without_cuda_graphs_a_ranged_artifact_launches_each_buckets_kernels(fake_driver, tmp_path):
    result = run_child(_ENCODER_CHILD, fake_driver, tmp_path, KILN_CUDA_GRAPH="0")
    assert result["validation"]["passed"] is True
    assert all(got["err"] < 1e-4 for got in result["shapes"].values()), result["shapes"]
    assert result["launches"]["graphs"] == 0 and result["launches"]["direct"] > 0


def test_a_ranged_cuda_decoder_generates_onnxruntimes_tokens_from_an_empty_cache(fake_driver, tmp_path):
    """Run-time lengths that are sums (present = past + new), a KV cache compacted along its length, and an empty
    past (a device buffer at address 0) on the first step."""
    result = run_child(_DECODER_CHILD, fake_driver, tmp_path)
    assert result["passed"] is True
    for how in ("host", "device"):  # host buffers (kiln_run_shaped), device ones (kiln_run_device_shaped)
        assert result[how]["tokens"] == result["expected"] and result[how]["shapes_match"], (how, result)
        assert result[how]["err"] < 1e-4, (how, result)


def test_a_ranged_cuda_library_exports_the_shaped_entry_points_under_its_name():
    from tests.core.driver.dynamic_models import small_cnn

    art = core.compile(small_cnn(), target="cuda", input_shapes={"x": "1..4,3,8,8"}, name="cnn", validate="off")
    assert art.metadata["dynamic_shapes"]["variables"][0]["padded"] is True
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(art.library)], capture_output=True, text=True).stdout
    exported = {line.split()[-1] for line in symbols.splitlines()}
    assert {"cnn_run_shaped", "cnn_output_shapes", "cnn_run_device", "cnn_load"} <= exported
    assert not any(name.startswith("kiln_") for name in exported)  # the runtime stays internal
