"""`kiln run ART --input ...` takes .npy and .npz files (issue 36: an .npz gave "could not convert string to float:
'input'") and says what it expects when a file does not fit; the artifact's outputs match ONNX Runtime's."""
from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

from tests.cli.test_cli import kiln
from tests.conftest import tiny_model


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run-inputs")
    (folder / "tiny.onnx").write_bytes(tiny_model())
    proc = kiln("compile", folder / "tiny.onnx", "-t", "x86-64-v3", "--validate", "off", "-o", folder / "tiny.tar.gz")
    assert proc.returncode == 0, proc.stderr
    return folder


def _printed_y(stdout: str) -> np.ndarray:
    line = next(line for line in stdout.splitlines() if line.startswith("y: "))
    return np.array([float(v) for v in line.split("[", 2)[2].split("]")[0].split(",")], np.float32)


@pytest.mark.parametrize("form", ["x=file.npz (one array, any name)", "x=file.npz (array x)", "file.npz", "x=file.npy"])
def test_run_takes_npz_and_npy_inputs(artifact, form):
    x = np.random.default_rng(5).standard_normal((1, 3, 8, 8)).astype(np.float32)
    if form.endswith(".npy"):
        np.save(artifact / "x.npy", x)
        spec = f"x={artifact / 'x.npy'}"
    else:
        np.savez(artifact / "in.npz", **({"input": x} if "any name" in form else {"x": x}))
        spec = str(artifact / "in.npz") if form == "file.npz" else f"x={artifact / 'in.npz'}"
    proc = kiln("run", artifact / "tiny.tar.gz", "--input", spec)
    assert proc.returncode == 0, proc.stderr
    expected = onnxruntime.InferenceSession(str(artifact / "tiny.onnx")).run(None, {"x": x})[0].ravel()
    np.testing.assert_allclose(_printed_y(proc.stdout), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("arrays, needle", [
    ({"a": np.zeros((1, 3, 8, 8), np.float32), "b": np.zeros(3, np.float32)}, "the .npz holds a, b, none named 'x'"),
    ({"x": np.zeros((1, 3, 4, 4), np.float32)}, "float32[1, 3, 4, 4] given, the model takes float32[1, 3, 8, 8]"),
])
def test_run_says_what_it_expects(artifact, arrays, needle):
    np.savez(artifact / "bad.npz", **arrays)
    proc = kiln("run", artifact / "tiny.tar.gz", "--input", f"x={artifact / 'bad.npz'}")
    assert proc.returncode != 0 and needle in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1


def test_the_artifacts_main_finds_its_weights_from_any_directory(artifact, tmp_path):
    """main.c loaded "weights.bin" from the working directory: run from anywhere else, it failed."""
    import subprocess
    import tarfile

    folder = tmp_path / "unpacked"
    with tarfile.open(artifact / "tiny.tar.gz") as tar:
        tar.extractall(folder, filter="data")
    build = subprocess.run(["make", "-s"], cwd=folder, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    x = np.random.default_rng(9).standard_normal((1, 3, 8, 8)).astype(np.float32)
    (tmp_path / "x.bin").write_bytes(x.tobytes())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ran = subprocess.run([str(folder / "main"), str(tmp_path / "x.bin")], cwd=elsewhere, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    printed = np.array(ran.stdout.split(":", 1)[1].split(), np.float32)
    expected = onnxruntime.InferenceSession(str(artifact / "tiny.onnx")).run(None, {"x": x})[0].ravel()
    np.testing.assert_allclose(printed, expected[:8], rtol=1e-4, atol=1e-4)
