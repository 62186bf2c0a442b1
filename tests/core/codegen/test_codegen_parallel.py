"""PARALLEL loops: outlined into Kiln's pool (kiln_parallel_for), correct, and really run on its workers."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from core.codegen import lower_to_llvm_ir, optimized_llvm_ir
from tests.backend_calls import build_library
from core.target import get_target
from core.tir import (Allocate, Buffer, FloatImm, For, ForKind, IntImm, LetStmt, PrimFunc, Store, Var, cast, seq)

RNG = np.random.default_rng(5)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def heavy_kernel(name="heavy", rows=64, cols=256):
    """O[i, j] = sum_k A[i, k] * B[k, j] over a parallel i and a vectorized j (chunked)."""
    K = 32
    A, B, O = Buffer("A", (rows, K), "float32"), Buffer("B", (K, cols), "float32"), Buffer("O", (rows, cols), "float32")
    i, j, k = Var("i"), Var("j"), Var("k")
    body = For(i, IntImm(rows), ForKind.PARALLEL, For(j, IntImm(cols), ForKind.VECTORIZED, seq(
        Store(O, i * cols + j, FloatImm(0.0)),
        For(k, IntImm(K), ForKind.SERIAL, Store(O, i * cols + j, O.load(i * cols + j) + A.load(i * K + k) * B.load(k * cols + j))))))
    return PrimFunc(name, (A, B, O), body, 2, 1)


def test_ir_calls_the_kiln_pool():
    text = optimized_llvm_ir([heavy_kernel()])
    assert 'call void @kiln_parallel_for' in text.replace('"', "")
    assert "GOMP" not in text and "omp_" not in text


def test_parallel_result_matches(build):
    rows, cols = 37, 64
    func = heavy_kernel("mm", rows, cols)
    a = RNG.standard_normal((rows, 32)).astype("float32")
    b = RNG.standard_normal((32, cols)).astype("float32")
    o = np.full((rows, cols), np.nan, "float32")
    build(func).call("mm", a, b, o)
    np.testing.assert_allclose(o, a @ b, rtol=1e-4, atol=1e-4)


def test_free_values_reach_the_outlined_body(build):
    # An outer loop variable, a let variable, a symbolic extent and a per-thread local buffer.
    m, n = 3, 10
    A, O = Buffer("A", (m, n), "int64"), Buffer("O", (m, n), "int64")
    tmp = Buffer("tmp", (2,), "int64", scope="local")
    o_, i, ext, scale = Var("o"), Var("i"), Var("ext"), Var("scale")
    body = For(o_, IntImm(m), ForKind.SERIAL, LetStmt(scale, o_ * 10 + 1, LetStmt(ext, IntImm(n),
        For(i, ext, ForKind.PARALLEL, Allocate(tmp, seq(
            Store(tmp, IntImm(0), A.load(o_ * n + i) * scale),
            Store(tmp, IntImm(1), i),
            Store(O, o_ * n + i, tmp.load(IntImm(0)) + tmp.load(IntImm(1)))))))))
    a, out = RNG.integers(-9, 9, (m, n)), np.zeros((m, n), "int64")
    build(PrimFunc("freev", (A, O), body, 1, 1)).call("freev", a, out)
    ref = a * (np.arange(m) * 10 + 1)[:, None] + np.arange(n)[None, :]
    np.testing.assert_array_equal(out, ref)


def test_nested_parallel_runs_inner_serially(build):
    m, n = 4, 6
    A, O = Buffer("A", (m * n,), "float32"), Buffer("O", (m * n,), "float32")
    i, j = Var("i"), Var("j")
    body = For(i, IntImm(m), ForKind.PARALLEL, For(j, IntImm(n), ForKind.PARALLEL,
                                                   Store(O, i * n + j, A.load(i * n + j) + cast("float32", i))))
    func = PrimFunc("nest", (A, O), body, 1, 1)
    assert lower_to_llvm_ir([func]).count("call void @\"kiln_parallel_for\"") == 1
    a, o = RNG.standard_normal(m * n).astype("float32"), np.zeros(m * n, "float32")
    build(func).call("nest", a, o)
    np.testing.assert_allclose(o, a + np.repeat(np.arange(m), n))


def test_small_and_empty_extents(build):
    A, O = Buffer("A", (3,), "float32"), Buffer("O", (3,), "float32")
    i, n = Var("i"), Var("n")
    for extent, name in ((1, "one"), (3, "three"), (0, "zero")):
        body = LetStmt(n, IntImm(extent), For(i, n, ForKind.PARALLEL, Store(O, i, A.load(i) * 3.0)))
        a, o = np.arange(3, dtype="float32"), np.full(3, -1.0, "float32")
        build(PrimFunc(name, (A, O), body, 1, 1)).call(name, a, o)
        np.testing.assert_array_equal(o[:extent], a[:extent] * 3)
        np.testing.assert_array_equal(o[extent:], -1.0)


def count_kernel(name: str, n: int) -> PrimFunc:
    """O[i] += 1 over a parallel i: after one call every element is 1 iff each iteration ran exactly once."""
    O = Buffer("O", (n,), "int32")
    i = Var("i")
    return PrimFunc(name, (O,), For(i, IntImm(n), ForKind.PARALLEL, Store(O, i, O.load(i) + IntImm(1, "int32"))), 0, 1)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_every_iteration_runs_exactly_once(build, threads):
    sizes = [1, 2, 3, 5, 7, 13, 97, 1001, 65537]
    lib = build([count_kernel(f"count{n}", n) for n in sizes])
    lib.set_num_threads(threads)
    assert lib.num_threads == threads
    for n in sizes:
        for _ in range(5):
            o = np.zeros(n, "int32")
            lib.call(f"count{n}", o)
            np.testing.assert_array_equal(o, 1, err_msg=f"extent {n}, {threads} threads")


def test_results_identical_to_the_serial_loop(build):
    rows, cols = 37, 256
    par = build(heavy_kernel("par", rows, cols))
    serial_func = heavy_kernel("ser", rows, cols)
    body = serial_func.body
    serial = build(PrimFunc("ser", serial_func.params, For(body.var, body.extent, ForKind.SERIAL, body.body), 2, 1))
    a = RNG.standard_normal((rows, 32)).astype("float32")
    b = RNG.standard_normal((32, cols)).astype("float32")
    ref = np.zeros((rows, cols), "float32")
    serial.call("ser", a, b, ref)
    for threads in (1, 2, 3, 2):
        par.set_num_threads(threads)
        for _ in range(5):
            o = np.full((rows, cols), np.nan, "float32")
            par.call("par", a, b, o)
            assert o.tobytes() == ref.tobytes(), f"{threads} threads"


def test_set_num_threads_and_default(build):
    lib = build(count_kernel("cnt", 5))
    for n in (3, 1, 2):
        lib.set_num_threads(n)
        assert lib.num_threads == n
    lib.set_num_threads(0)
    assert lib.num_threads >= 1


_PROBE = """
import json, sys, numpy as np
sys.path.insert(0, {root!r})
from core.codegen import load_kernels
lib = load_kernels({lib!r})
a = np.ones((64, 32), "float32"); b = np.ones((32, 256), "float32"); o = np.zeros((64, 256), "float32")
ok = True
# A worker that is slow to wake, or starved of CPU by other processes, loses its chunk to the caller;
# over enough calls it must help (each call takes ~50 us, so allow many).
import os, time
deadline = time.monotonic() + (20 if lib.num_threads > 1 else 0.2)
while time.monotonic() < deadline and not lib.worker_chunks:
    lib.call("heavy", a, b, o)
    ok = ok and bool((o == 32).all())
print(json.dumps({{"threads": lib.num_threads, "worker_chunks": lib.worker_chunks, "ok": ok,
                  "os_threads": len(os.listdir("/proc/self/task"))}}))
"""


@pytest.mark.parametrize("env_name", ["KILN_NUM_THREADS", "OMP_NUM_THREADS"])
@pytest.mark.parametrize("threads", [2, 1])
def test_parallel_loop_really_uses_the_pool_workers(tmp_path, env_name, threads):
    """With 2 threads (from the environment) pool workers, other OS threads than the caller, run chunks
    of the generated kernel; with 1 thread none does. The pool counts chunks its workers run."""
    lib = build_library([heavy_kernel()], get_target("native"), tmp_path / "heavy.so")
    env = {k: v for k, v in os.environ.items() if k not in ("KILN_NUM_THREADS", "OMP_NUM_THREADS")}
    env[env_name] = str(threads)
    probe = textwrap.dedent(_PROBE.format(root=ROOT, lib=str(lib)))
    proc = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["ok"] and result["threads"] == threads
    if threads == 1:
        assert result["worker_chunks"] == 0
    else:
        assert result["worker_chunks"] > 0


def test_library_needs_no_libgomp(tmp_path):
    lib = build_library([heavy_kernel()], get_target("native"), tmp_path / "heavy.so")
    needed = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True)
    if needed.returncode != 0:
        pytest.skip("no readelf")
    assert "libgomp" not in needed.stdout
