"""Kiln's thread pool from C: threadpool_check.c linked with kiln_threadpool.c, one process per case
(exactly-once chunks, nesting, thread-count changes, float mode, concurrent launchers, parking, fork),
and the race-prone cases again under ThreadSanitizer where the compiler has it."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[3] / "core" / "runtime"
CHECK_C = Path(__file__).with_name("threadpool_check.c")
CASES = ["exactly_once", "nested", "set_threads", "workers_help", "float_mode", "concurrent", "stress", "parking",
         "fork"]
# set_threads counts OS threads (TSan adds its own), parking reads thread states, fork is unsupported by TSan.
TSAN_CASES = ["exactly_once", "nested", "workers_help", "float_mode", "concurrent", "stress"]

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


def _build(out: Path, *flags: str) -> Path:
    cmd = ["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-pthread", *flags, f"-I{RUNTIME}", str(CHECK_C),
           str(RUNTIME / "kiln_threadpool.c"), "-o", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


@pytest.fixture(scope="module")
def check_exe(tmp_path_factory) -> Path:
    return _build(tmp_path_factory.mktemp("pool") / "threadpool_check", "-O2")


@pytest.fixture(scope="module")
def tsan_exe(tmp_path_factory) -> Path:
    try:
        return _build(tmp_path_factory.mktemp("pool-tsan") / "threadpool_check", "-O1", "-g", "-fsanitize=thread")
    except subprocess.CalledProcessError as e:
        pytest.skip(f"no ThreadSanitizer here: {e.stderr.strip()[:200]}")


def _run(exe: Path, case: str, timeout: int) -> None:
    env = dict(os.environ, KILN_NUM_THREADS="2", KILN_POOL_SPIN_US="1000")
    env.pop("OMP_NUM_THREADS", None)
    proc = subprocess.run([str(exe), case], capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr


@pytest.mark.parametrize("case", CASES)
def test_pool(check_exe, case):
    _run(check_exe, case, timeout=120)


@pytest.mark.parametrize("case", TSAN_CASES)
def test_pool_under_thread_sanitizer(tsan_exe, case):
    _run(tsan_exe, case, timeout=300)
