"""PARALLEL loops: outlined into GOMP_parallel, correct, and really run on more than one thread."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from core.codegen import build_library, lower_to_llvm_ir, optimized_llvm_ir
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


def test_ir_calls_gomp_parallel():
    text = optimized_llvm_ir([heavy_kernel()])
    assert "call void @GOMP_parallel" in text
    assert "omp_get_thread_num" in text and "omp_get_num_threads" in text


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
    assert lower_to_llvm_ir([func]).count("call void @\"GOMP_parallel\"") == 1
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


_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
/* Test-only hook: records which OS threads ask OpenMP for their thread number. */
static pthread_t seen[256];
static int nseen;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
int omp_get_thread_num(void) {
    static int (*real)(void);
    /* libgomp came in with the kernel library (dlopen, local scope), so RTLD_NEXT cannot see it. */
    if (!real) real = (int (*)(void))dlsym(dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD), "omp_get_thread_num");
    pthread_t self = pthread_self();
    pthread_mutex_lock(&mu);
    int known = 0;
    for (int i = 0; i < nseen; i++) known |= pthread_equal(seen[i], self);
    if (!known && nseen < 256) seen[nseen++] = self;
    pthread_mutex_unlock(&mu);
    return real();
}
int shim_distinct_threads(void) { return nseen; }
"""

_PROBE = """
import ctypes, json, sys, numpy as np
sys.path.insert(0, {root!r})
from core.codegen import load_kernels
shim = ctypes.CDLL({shim!r})
lib = load_kernels({lib!r})
a = np.ones((64, 32), "float32"); b = np.ones((32, 256), "float32"); o = np.zeros((64, 256), "float32")
lib.call("heavy", a, b, o)
print(json.dumps({{"threads": shim.shim_distinct_threads(), "ok": bool((o == 32).all())}}))
"""


@pytest.mark.parametrize("omp_threads,expected", [(2, 2), (1, 1)])
def test_parallel_loop_really_uses_the_thread_team(tmp_path, omp_threads, expected):
    """Counts distinct OS threads entering the outlined body (via an LD_PRELOADed omp_get_thread_num);
    with OMP_NUM_THREADS=2 it must be 2, which a serial loop could never produce."""
    shim_c, shim = tmp_path / "shim.c", tmp_path / "libshim.so"
    shim_c.write_text(_SHIM)
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(shim), str(shim_c), "-ldl", "-lpthread"], check=True)
    lib = build_library([heavy_kernel()], "native", tmp_path / "heavy.so")
    env = dict(os.environ, LD_PRELOAD=str(shim), OMP_NUM_THREADS=str(omp_threads), OMP_DYNAMIC="false")
    probe = textwrap.dedent(_PROBE.format(root=ROOT, shim=str(shim), lib=str(lib)))
    proc = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["ok"]
    assert result["threads"] == expected
