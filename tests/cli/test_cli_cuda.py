"""`kiln compile -t cuda` and `kiln targets` on a machine without a GPU: the artifact is built, the
compile says run-validation was skipped and why, `kiln run` refuses with one clear line."""
from __future__ import annotations

import json
import tarfile

import pytest

from core.runtime.loader import cuda_device_count
from tests.cli.test_cli import assert_one_line_error, kiln, tiny_model

no_gpu = pytest.mark.skipif(cuda_device_count() > 0, reason="this machine has an NVIDIA GPU")


def test_targets_describe_cuda():
    proc = kiln("targets")
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("cuda "))
    assert "nvptx64-nvidia-cuda" in line and "sm_80 PTX" in line
    listed = {t["name"]: t for t in json.loads(kiln("targets", "--json").stdout)}
    assert listed["cuda"]["kind"] == "cuda" and listed["cuda"]["runs_on_host"] == (cuda_device_count() > 0)


@no_gpu
def test_compile_for_cuda_without_a_gpu(tmp_path):
    out = tmp_path / "relu_cuda.tar.gz"
    proc = kiln("compile", tiny_model(tmp_path / "relu.onnx"), "-t", "cuda -arch=sm_90", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert "validation: skipped (no NVIDIA GPU on this machine" in proc.stdout
    with tarfile.open(out) as tar:
        meta = json.load(tar.extractfile("metadata.json"))
    assert (meta["target_kind"], meta["cuda_arch"]) == ("cuda", "sm_90")
    assert_one_line_error(kiln("run", out), "NVIDIA")
