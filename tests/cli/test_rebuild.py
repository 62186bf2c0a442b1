"""`kiln rebuild` and `kiln compile --baseline`: a rebuild says byte-identical (exit 0) or what differs (exit 1); the
gate fails an -O0 build against its -O3 baseline with one line and exit 3; bad input is one line and exit 2."""
from __future__ import annotations

import tarfile

from tests.cli.test_cli import assert_one_line_error, kiln
from tests.conftest import assert_artifact_matches_onnxruntime, tiny_model
from tests.gate_models import elementwise_chain


def test_rebuild_is_byte_identical_and_writes_the_rebuilt_artifact(tmp_path):
    model = tmp_path / "tiny.onnx"
    model.write_bytes(tiny_model())
    built = kiln("compile", model, "-o", tmp_path / "a.tar.gz")
    assert built.returncode == 0, built.stderr
    proc = kiln("rebuild", tmp_path / "a.tar.gz", "--model", model, "-o", tmp_path / "b.tar.gz")
    assert proc.returncode == 0, proc.stderr
    assert "rebuild: byte-identical: library, weights, header, metadata" in proc.stdout
    with tarfile.open(tmp_path / "a.tar.gz") as a, tarfile.open(tmp_path / "b.tar.gz") as b:
        assert a.extractfile("libkiln_model.so").read() == b.extractfile("libkiln_model.so").read()
    assert_artifact_matches_onnxruntime(tmp_path / "b.tar.gz", tiny_model())


def test_rebuild_refuses_another_model_in_one_line(tmp_path):
    model, other = tmp_path / "tiny.onnx", tmp_path / "other.onnx"
    model.write_bytes(tiny_model())
    other.write_bytes(tiny_model(seed=3))
    assert kiln("compile", model, "-o", tmp_path / "a.tar.gz").returncode == 0
    proc = kiln("rebuild", tmp_path / "a.tar.gz", "--model", other)
    assert proc.returncode == 2
    assert_one_line_error(proc, "is not the one the artifact was built from")
    assert_one_line_error(kiln("rebuild", tmp_path / "missing.tar.gz", "--model", model), "no such artifact")


def test_compile_gate_fails_O0_against_O3_and_passes_the_same_options(tmp_path):
    model = tmp_path / "chain.onnx"
    model.write_bytes(elementwise_chain())
    assert kiln("compile", model, "-O", "3", "-o", tmp_path / "base.tar.gz").returncode == 0
    slower = kiln("compile", model, "-O", "0", "-o", tmp_path / "o0.tar.gz", "--baseline", tmp_path / "base.tar.gz",
                  "--max-slowdown", "5%", "--max-error-growth", "2x")
    assert slower.returncode == 3, slower.stderr
    assert_one_line_error(slower, "gate failed:", "slower than the baseline base.tar.gz", "allowed 5%")
    same = kiln("compile", model, "-O", "3", "-o", tmp_path / "o3.tar.gz", "--baseline", tmp_path / "base.tar.gz",
                "--max-slowdown", "100%")
    assert same.returncode == 0, same.stderr
    assert "gate passed:" in same.stderr


def test_bad_gate_options_are_refused_before_compiling(tmp_path):
    model = tmp_path / "tiny.onnx"
    model.write_bytes(tiny_model())
    proc = kiln("compile", model, "-o", tmp_path / "a.tar.gz", "--baseline", tmp_path / "none.tar.gz")
    assert proc.returncode == 2
    assert_one_line_error(proc, "no such artifact")
    proc = kiln("compile", model, "-o", tmp_path / "a.tar.gz", "--baseline", "x", "--max-slowdown", "fast")
    assert proc.returncode == 2
    assert_one_line_error(proc, "--max-slowdown")
    assert not (tmp_path / "a.tar.gz").exists()
