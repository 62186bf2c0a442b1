"""A model whose If takes a branch refused at the compiled shapes on random inputs (silero VAD's sample rate):
`kiln run` (--bench too) and the CI gate of `kiln compile --baseline` run the user's inputs, and without them say in
one line that the random inputs took that path and how to give real ones."""
from __future__ import annotations

import numpy as np
import pytest

from tests.cli.test_cli import kiln
from tests.core.driver.test_pipeline_control_flow import _rate_model

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The rate model at 512 samples (its else branch, taken by a random rate, does not fit) and a 16 kHz sample."""
    folder = tmp_path_factory.mktemp("control-flow-inputs")
    (folder / "rate.onnx").write_bytes(_rate_model())
    x = np.random.default_rng(0).standard_normal((1, 512)).astype(np.float32)
    np.savez(folder / "sample.npz", x=x, rate=np.array(16000))
    proc = kiln("compile", folder / "rate.onnx", "-t", "x86-64-v3", "--input-shape", "x=1,512", "--validation-inputs",
                folder / "sample.npz", "-o", folder / "base.tar.gz")
    assert proc.returncode == 0, proc.stderr
    return folder


def _one_line_error(proc) -> str:
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("kiln: error: ")]
    return line


@pytest.mark.parametrize("bench", [True, False])
def test_run_on_random_inputs_that_take_a_refused_branch_says_so(folder, bench):
    proc = kiln("run", folder / "base.tar.gz", *(["--bench"] if bench else []))
    line = _one_line_error(proc)
    assert "the seeded random 'x', 'rate' took a path this artifact does not run" in line
    assert "else branch was taken" in line and "--input NAME=FILE.npy or --input FILE.npz" in line


def test_run_bench_on_the_users_inputs(folder):
    proc = kiln("run", folder / "base.tar.gz", "--bench", "--repeat", "5", "--input", folder / "sample.npz")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("latency over 5 runs")


def test_the_gate_times_the_users_inputs_and_without_them_says_why_it_cannot(folder):
    common = [folder / "rate.onnx", "-t", "x86-64-v3", "--input-shape", "x=1,512", "--baseline", folder / "base.tar.gz",
              "--max-slowdown", "1000%", "-o", folder / "new.tar.gz"]
    proc = kiln("compile", *common, "--validation-inputs", folder / "sample.npz")
    assert proc.returncode == 0, proc.stderr
    assert "gate passed" in proc.stderr
    line = _one_line_error(kiln("compile", *common, "--validate", "off"))
    assert "the gate's seeded random inputs took a path the build does not run" in line
    assert "else branch was taken" in line and "--validation-inputs" in line
