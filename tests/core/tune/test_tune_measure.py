"""Measurement survives bad kernels: a crash, a hang and a wrong answer each become an error code
on that candidate, and the candidates after them are still measured."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from core.tune.features import itervar_features
from core.tune.measure import BuildResult, LocalBuilder, LocalRunner, MeasureErrorNo, Measurer

N = 64
KERNELS = {
    "ok": "for (int i = 0; i < N; i++) y[i] = 2 * x[i];",
    "crash": "volatile float *p = 0; p[1] = x[0];",  # a null-pointer store: SIGSEGV
    "hang": "volatile long s = 0; for (;;) s++;",
    "wrong": "for (int i = 0; i < N; i++) y[i] = 2 * x[i] + 1;",
    "aborts": "raise(SIGABRT);",
}


@pytest.fixture(scope="module")
def bad_library(tmp_path_factory) -> str:
    """A kernel library (Kiln's calling convention and signature table) with hostile kernels, in C."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    params = [{"name": "x", "shape": [N], "dtype": "float32"}, {"name": "y", "shape": [N], "dtype": "float32"}]
    table = json.dumps([{"name": k, "params": params, "num_inputs": 1, "num_outputs": 1} for k in KERNELS])
    src = "#include <signal.h>\n#define N %d\n" % N
    src += "const char kiln_kernels_json[] = %s;\n" % json.dumps(table)
    src += "".join(f"void {k}(float *x, float *y) {{ {body} }}\n" for k, body in KERNELS.items())
    d = tmp_path_factory.mktemp("bad")
    (d / "bad.c").write_text(src)
    subprocess.run([cc, "-O1", "-shared", "-fPIC", "-o", str(d / "bad.so"), str(d / "bad.c")], check=True)
    return str(d / "bad.so")


def test_runner_survives_crash_hang_and_wrong_answers(bad_library):
    runner = LocalRunner(timeout_s=2.0, min_repeat_ms=1.0, repeat=2, threads=0)
    names = ["ok", "crash", "ok", "hang", "wrong", "aborts", "ok"]
    builds = [BuildResult(bad_library, n) for n in names]
    builds.insert(1, BuildResult(None, "failed", MeasureErrorNo.COMPILE_HOST, "linker said no"))
    results = runner.run(builds, reference=BuildResult(bad_library, "ok"))
    codes = [r.error_no for r in results]
    assert codes == [MeasureErrorNo.NO_ERROR, MeasureErrorNo.COMPILE_HOST, MeasureErrorNo.RUNTIME_DEVICE,
                     MeasureErrorNo.NO_ERROR, MeasureErrorNo.RUN_TIMEOUT, MeasureErrorNo.WRONG_ANSWER,
                     MeasureErrorNo.RUNTIME_DEVICE, MeasureErrorNo.NO_ERROR]
    assert "SIGSEGV" in results[2].error_msg and "SIGABRT" in results[6].error_msg
    ok = results[-1]
    assert len(ok.costs) == 2 and all(c > 0 for c in ok.costs)


def test_runner_keeps_its_worker_for_the_same_reference(bad_library):
    runner = LocalRunner(timeout_s=2.0, min_repeat_ms=1.0, repeat=1, threads=0)
    reference = BuildResult(bad_library, "ok")
    try:
        assert runner.run([BuildResult(bad_library, "ok")], reference=reference)[0].ok
        first = runner._worker.proc.pid
        assert runner.run([BuildResult(bad_library, "ok")], reference=reference)[0].ok
        assert runner._worker.proc.pid == first  # the next batch: no new process, no reference run again
        assert runner.run([BuildResult(bad_library, "crash")], reference=reference)[0].error_no == MeasureErrorNo.RUNTIME_DEVICE
        assert runner._worker is None  # the crash took it
        assert runner.run([BuildResult(bad_library, "ok")], reference=reference)[0].ok
        second = runner._worker.proc.pid
        assert runner.run([BuildResult(bad_library, "ok")], reference=BuildResult(bad_library, "wrong"))[0].error_no \
            == MeasureErrorNo.WRONG_ANSWER  # another task's reference: a worker that ran that one
        assert runner._worker.proc.pid not in (first, second)
    finally:
        runner.close()
    assert runner._worker is None


def test_runner_times_only_while_holding_the_timing_lock(bad_library, tmp_path):
    lock = tmp_path / "timing.lock"
    runner = LocalRunner(timeout_s=1.0, min_repeat_ms=1.0, repeat=1, threads=0, timing_lock=str(lock))
    try:
        with open(lock, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)  # another runner on this machine is timing
            held = runner.run([BuildResult(bad_library, "ok")])
        runner.timeout_s = 30.0  # free: a loaded machine may take more than a second to load and time the kernel
        free = runner.run([BuildResult(bad_library, "ok")])
    finally:
        runner.close()
    assert held[0].error_no == MeasureErrorNo.RUN_TIMEOUT and free[0].ok


def test_cold_timing_gives_each_call_its_own_weights():
    from core.tune.measure_worker import MAX_COLD_COPIES, cold_sets

    data, weights, out = np.ones(16, np.float32), np.arange(256, dtype=np.float32), np.zeros(16, np.float32)
    sets = cold_sets([data, weights, out], [1], 4096)
    assert len(sets) == 4  # 4 x 1 KiB of weights
    assert len({id(s[1]) for s in sets}) == 4 and all(np.array_equal(s[1], weights) for s in sets)
    assert all(s[0] is data and s[2] is out for s in sets)  # activations and outputs stay shared
    assert len(cold_sets([data, weights, out], [1], 1 << 30)) == MAX_COLD_COPIES
    assert cold_sets([data, weights, out], [], 4096) == [[data, weights, out]]
    assert cold_sets([data, weights, out], [1], 0) == [[data, weights, out]]


def test_runner_times_constant_inputs_cold(bad_library):
    runner = LocalRunner(timeout_s=2.0, min_repeat_ms=1.0, repeat=2, threads=0, cold_bytes=1 << 20)
    results = runner.run([BuildResult(bad_library, "ok")], reference=BuildResult(bad_library, "ok"), constant_inputs=[0])
    assert results[0].ok and len(results[0].costs) == 2


def test_reference_that_crashes_fails_every_candidate_cleanly(bad_library):
    runner = LocalRunner(timeout_s=2.0, min_repeat_ms=1.0, repeat=1, threads=0)
    results = runner.run([BuildResult(bad_library, "ok")], reference=BuildResult(bad_library, "crash"))
    assert results[0].error_no == MeasureErrorNo.UNKNOWN_ERROR and "reference" in results[0].error_msg


def test_measurer_builds_and_checks_real_candidates(conv_task):
    space = conv_task.space
    invalid = next((c for c in space if not conv_task.valid(c)), None)
    configs = [space.default, space.get((space.default.index + 1) % len(space))]
    configs += [invalid] if invalid is not None else []
    measurer = Measurer(conv_task, LocalRunner(timeout_s=20, min_repeat_ms=1.0, repeat=1, threads=1))
    try:
        builds, results = measurer.measure(configs)
    finally:
        measurer.close()
    assert results[0].ok and results[1].ok  # a different tiling computes the same numbers
    assert builds[0].func is not None
    if invalid is not None:
        assert results[2].error_no == MeasureErrorNo.INSTANTIATION_ERROR


def test_parallel_builder_matches_the_serial_one(conv_task, tmp_path):
    configs = [c for c in conv_task.space if conv_task.valid(c)][:4]
    serial = LocalBuilder(tmp_path / "serial", n_parallel=0).build(conv_task, configs)
    builder = LocalBuilder(tmp_path / "parallel", n_parallel=2)
    try:
        parallel = builder.build(conv_task, configs)
    finally:
        builder.close()
    assert [r.name for r in parallel] == [r.name for r in serial]
    assert all(r.error_no == MeasureErrorNo.NO_ERROR and Path(r.lib).exists() for r in parallel)
    # The lowered candidate comes back from the build process whole: the same loop-program features.
    for a, b in zip(serial, parallel):
        np.testing.assert_array_equal(itervar_features(a.func), itervar_features(b.func))


class _HostileTask:
    """A task whose unpickling, in the build process, crashes it (as a crash inside LLVM would) or hangs."""
    key = "deadbeef"

    def __init__(self, effect):
        self.effect = effect

    def __reduce__(self):
        return self.effect


# The crash gets a timeout no loaded machine reaches (it dies at once); only the hang waits for its 1 s.
@pytest.mark.parametrize("effect, timeout_s, error, message", [
    ((os._exit, (3,)), 120.0, MeasureErrorNo.COMPILE_HOST, "build process died"),
    ((time.sleep, (60,)), 1.0, MeasureErrorNo.BUILD_TIMEOUT, "no build in 1 s"),
], ids=["crash", "hang"])
def test_a_build_that_crashes_or_hangs_fails_its_candidates_and_the_next_batch_builds(conv_task, tmp_path, effect,
                                                                                      timeout_s, error, message):
    configs = [c for c in conv_task.space if conv_task.valid(c)][:3]  # more candidates than build processes
    builder = LocalBuilder(tmp_path, n_parallel=2, timeout_s=timeout_s)
    try:
        failed = builder.build(_HostileTask(effect), configs)
        assert [r.error_no for r in failed] == [error] * 3 and message in failed[0].error_msg
        # A real build takes 0.5-1 s here, longer on a loaded CI machine: give it a real timeout.
        builder.timeout_s = 60.0
        again = builder.build(conv_task, configs)
    finally:
        builder.close()
    assert [(r.error_no, r.error_msg) for r in again] == [(MeasureErrorNo.NO_ERROR, "")] * 3
