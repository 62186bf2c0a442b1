"""`kiln compile --jobs N`: the processes that lower and compile kernels; a bad count is one line and a non-zero exit."""
from __future__ import annotations

from tests.cli.test_cli import assert_one_line_error, kiln, tiny_model
from tests.core.codegen.test_kernel_cache import small_cnn


def test_jobs_below_one_is_one_clear_line(tmp_path):
    assert_one_line_error(kiln("compile", tiny_model(tmp_path / "m.onnx"), "--jobs", "0", "-o", tmp_path / "o.tar.gz"),
                          "--jobs must be at least 1")


def test_jobs_sets_the_build_processes_and_the_compile_validates(tmp_path):
    model = tmp_path / "cnn.onnx"
    model.write_bytes(small_cnn())
    done = kiln("compile", model, "--jobs", "2", "--quick", "--kernel-cache", "off", "-o", tmp_path / "o.tar.gz")
    assert done.returncode == 0, done.stderr
    assert "compiled on 2 processes" in done.stdout and "validation: max abs error" in done.stdout
