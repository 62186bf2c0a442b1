"""VECTORIZED loops become real SIMD IR (contiguous, broadcast, gather, masked) and compute what numpy does."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from core.codegen import lower_to_llvm_ir, optimized_llvm_ir
from tests.backend_calls import build_library
from core.target import get_target, host_target
from core.tir import (Allocate, Buffer, FloatImm, For, ForKind, IfThenElse, IntImm, LetStmt, PrimFunc, Store, Var,
                      call, cast, logical_and, select, seq)

RNG = np.random.default_rng(11)
HOST_AVX2 = host_target().arch == "x86_64" and "+avx2" in host_target().features


def vec_kernel(name, m, lanes, dtype="float32"):
    """O[i*lanes + j] = exp(A[i*lanes + j]) * s[i] + B[j*3] with j vectorized: contiguous, broadcast, gather."""
    A, S, B = Buffer("A", (m * lanes,), dtype), Buffer("s", (m,), dtype), Buffer("B", (3 * lanes,), dtype)
    O = Buffer("O", (m * lanes,), dtype)
    i, j = Var("i"), Var("j")
    body = For(i, IntImm(m), ForKind.SERIAL, For(j, IntImm(lanes), ForKind.VECTORIZED, Store(
        O, i * lanes + j, call("exp", A.load(i * lanes + j)) * S.load(i) + B.load(j * 3))))
    return PrimFunc(name, (A, S, B, O), body, 3, 1)


def vec_reference(a, s, b, m, lanes):
    return np.exp(a).reshape(m, lanes) * s[:, None] + b[::3][None, :]


@pytest.mark.skipif(not HOST_AVX2, reason="needs an x86-64 host with AVX2")
def test_host_ir_has_8_wide_float_vectors():
    text = optimized_llvm_ir([vec_kernel("vk", 4, 8)], get_target("native"))
    assert re.search(r"load <8 x float>", text), text
    assert re.search(r"store <8 x float>", text)
    assert re.search(r"fmul[a-z ]* <8 x float>", text)


def test_v4_ir_has_16_wide_float_vectors(tmp_path):
    # Compile only: x86-64-v4 (AVX-512) code may not run on this machine.
    func = vec_kernel("vk16", 4, 16)
    text = optimized_llvm_ir([func], get_target("x86-64-v4"))
    assert "load <16 x float>" in text and "store <16 x float>" in text
    asm = __import__("core.codegen", fromlist=["assembly"]).assembly([func], get_target("x86-64-v4"))
    assert "zmm" in asm  # really 512-bit registers
    assert build_library([func], get_target("x86-64-v4"), tmp_path / "v4.so").exists()


def test_unoptimized_ir_is_already_vector():
    # The vectors come from Kiln's own vectorizer, not only from LLVM's loop vectorizer.
    text = lower_to_llvm_ir([vec_kernel("vk", 4, 8)], get_target("native"))
    assert "<8 x float>" in text
    assert ("_ZGVdN8v_expf" if HOST_AVX2 else "llvm.exp.v8f32") in text  # one vector exp, not 8 calls


@pytest.mark.parametrize("dtype,lanes", [("float32", 8), ("float32", 19), ("float64", 8), ("float64", 3)])
@pytest.mark.parametrize("name", ["exp", "log", "sin", "cos"])
def test_vector_math_matches_numpy(build, dtype, lanes, name):
    A, O = Buffer("A", (lanes,), dtype), Buffer("O", (lanes,), dtype)
    j = Var("j")
    func = PrimFunc("vm", (A, O), For(j, IntImm(lanes), ForKind.VECTORIZED, Store(O, j, call(name, A.load(j)))), 1, 1)
    a = RNG.uniform(0.01, 20, lanes).astype(dtype) if name == "log" else RNG.uniform(-20, 20, lanes).astype(dtype)
    o = np.zeros(lanes, dtype)
    build(func).call("vm", a, o)
    ref = getattr(np, name)(a)
    np.testing.assert_allclose(o, ref, rtol=4e-7 if dtype == "float32" else 1e-14, atol=1e-6 if dtype == "float32" else 1e-13)


def test_v4_uses_16_lane_vector_math():
    A, O = Buffer("A", (16,), "float32"), Buffer("O", (16,), "float32")
    j = Var("j")
    func = PrimFunc("vm16", (A, O), For(j, IntImm(16), ForKind.VECTORIZED, Store(O, j, call("exp", A.load(j)))), 1, 1)
    assert "_ZGVeN16v_expf" in lower_to_llvm_ir([func], get_target("x86-64-v4"))
    assert "_ZGV" not in lower_to_llvm_ir([func], get_target("aarch64"))


@pytest.mark.parametrize("lanes", [8, 4, 16, 5])
def test_contiguous_broadcast_and_gather_match_numpy(build, lanes):
    m = 6
    lib = build(vec_kernel("vk", m, lanes))
    a, s, b = (RNG.standard_normal(n).astype("float32") for n in (m * lanes, m, 3 * lanes))
    o = np.zeros(m * lanes, "float32")
    lib.call("vk", a, s, b, o)
    np.testing.assert_allclose(o.reshape(m, lanes), vec_reference(a, s, b, m, lanes), rtol=1e-5, atol=1e-6)


def test_broadcast_load_stays_scalar():
    text = lower_to_llvm_ir([vec_kernel("vk", 4, 8)], get_target("native"))
    assert re.search(r"load float, ptr", text)  # s[i] is loaded once, as a scalar
    assert "shufflevector" in text  # ... and splat


def test_scatter_store_and_int_lanes(build):
    n = 8
    A, O = Buffer("A", (n,), "int32"), Buffer("O", (2 * n,), "int32")
    j = Var("j")
    body = seq(For(j, IntImm(2 * n), ForKind.VECTORIZED, Store(O, j, IntImm(-1, "int32"))),
               For(j, IntImm(n), ForKind.VECTORIZED, Store(O, j * 2, A.load(j) // 4 + A.load(j) % 3)))
    a, o = RNG.integers(-50, 50, n).astype("int32"), np.zeros(2 * n, "int32")
    build(PrimFunc("scat", (A, O), body, 1, 1)).call("scat", a, o)
    ref = np.full(2 * n, -1, "int32")
    ref[::2] = a // 4 + a % 3
    np.testing.assert_array_equal(o, ref)


def test_long_vectorized_loop_runs_in_chunks(build):
    n = 100  # above MAX_LANES: chunks of the natural width plus a remainder
    A, O = Buffer("A", (n,), "float32"), Buffer("O", (n,), "float32")
    j = Var("j")
    func = PrimFunc("long", (A, O), For(j, IntImm(n), ForKind.VECTORIZED, Store(O, j, A.load(j) * A.load(j) + 1.0)), 1, 1)
    text = lower_to_llvm_ir([func])
    assert "j.vchunk" in text
    a, o = RNG.standard_normal(n).astype("float32"), np.zeros(n, "float32")
    build(func).call("long", a, o)
    np.testing.assert_allclose(o, a * a + 1, rtol=1e-6)


def test_guarded_select_arms_in_a_chunked_loop_share_the_lane_ramp(build):
    """A lane-invariant select over gathers guards each arm with a branch; the loop variable's vector
    (first needed inside the first arm) must still dominate its use in the second (the remainder too)."""
    n = 100
    A, B, F, O = (Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32"), Buffer("F", (1,), "int32"),
                  Buffer("O", (n,), "float32"))
    j = Var("j")
    body = For(j, IntImm(n), ForKind.VECTORIZED, Store(O, j, select(
        F.load(IntImm(0)) > IntImm(0, "int32"), A.load((j * 7) % n), B.load((j * 3) % n))))
    lib = build(PrimFunc("arms", (A, B, F, O), body, 3, 1))
    a, b = RNG.standard_normal(n).astype("float32"), RNG.standard_normal(n).astype("float32")
    for flag in (1, 0):
        o = np.zeros(n, "float32")
        lib.call("arms", a, b, np.array([flag], "int32"), o)
        np.testing.assert_array_equal(o, a[np.arange(n) * 7 % n] if flag else b[np.arange(n) * 3 % n])


def test_masked_lanes_never_touch_invalid_memory(build):
    # Padding-style select with a lane-dependent condition: out-of-range lanes must not be loaded.
    n, pad = 12, 3
    A, O = Buffer("A", (n,), "float32"), Buffer("O", (n + 2 * pad,), "float32")
    j = Var("j")
    src = j - pad
    cond = logical_and(src >= 0, src < n)
    far = j + 10 ** 12
    body = For(j, IntImm(n + 2 * pad), ForKind.VECTORIZED, Store(
        O, j, select(cond, A.load(src), FloatImm(0.0)) + select(j < 2, A.load(j), select(j > 100, A.load(far), FloatImm(0.5)))))
    func = PrimFunc("pad", (A, O), body, 1, 1)
    text = lower_to_llvm_ir([func])
    assert "llvm.masked.load" in text
    a, o = RNG.standard_normal(n).astype("float32"), np.zeros(n + 2 * pad, "float32")
    build(func).call("pad", a, o)
    ref = np.pad(a, pad) + np.where(np.arange(n + 2 * pad) < 2, np.pad(a, (0, 2 * pad))[: n + 2 * pad], 0.5)
    np.testing.assert_allclose(o, ref, rtol=1e-6)


def test_a_read_inside_a_run_time_length_is_unmasked_in_whole_tiles(build):
    """select(j < n, A[j * 3], 0) with n read at run time: a tile whose lanes are all inside n takes the plain
    gather (its own block), the tile crossing n the masked one, and no lane past n reads A (it ends at n * 3)."""
    total = 40
    N, O = Buffer("N", (1,), "int64"), Buffer("O", (total,), "float32")
    j = Var("j")
    for n in (0, 1, 7, 8, 9, 23, 40):
        A = Buffer("A", (max(3 * n - 2, 1),), "float32")
        body = For(j, IntImm(total), ForKind.VECTORIZED, Store(
            O, j, select(cast("int64", j) < N.load(IntImm(0)), A.load(j * 3), FloatImm(0.0))))
        func = PrimFunc(f"strided{n}", (A, N, O), body, 2, 1)
        if n == 0:
            assert "vsel.whole" in lower_to_llvm_ir([func])
        a, o = RNG.standard_normal(max(3 * n - 2, 1)).astype("float32"), np.full(total, 9.0, "float32")
        build(func).call(f"strided{n}", a, np.array([n], "int64"), o)
        np.testing.assert_array_equal(o, np.concatenate([a[::3][:n], np.zeros(total - n, "float32")]))


def test_inner_reduction_loop_in_vector_mode(build):
    # C[j] = sum_k A[k] * B[k, j] with j vectorized and k an inner serial loop (TVM-style dense).
    K, N = 7, 8
    A, B, C = Buffer("A", (K,), "float32"), Buffer("B", (K, N), "float32"), Buffer("C", (N,), "float32")
    j, k = Var("j"), Var("k")
    body = For(j, IntImm(N), ForKind.VECTORIZED, seq(
        Store(C, j, FloatImm(0.0)),
        For(k, IntImm(K), ForKind.SERIAL, Store(C, j, C.load(j) + A.load(k) * B.load(k * N + j)))))
    func = PrimFunc("dense", (A, B, C), body, 2, 1)
    assert "<8 x float>" in lower_to_llvm_ir([func])
    a, b, c = RNG.standard_normal(K).astype("float32"), RNG.standard_normal((K, N)).astype("float32"), np.zeros(N, "float32")
    build(func).call("dense", a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_lane_dependent_let_and_invariant_if(build):
    n = 8
    A, O, F = Buffer("A", (2 * n + 1,), "float64"), Buffer("O", (n,), "float64"), Buffer("F", (1,), "int32")
    j, t = Var("j"), Var("t")
    body = For(j, IntImm(n), ForKind.VECTORIZED, LetStmt(t, j * 2 + 1, IfThenElse(
        F.load(IntImm(0)) > IntImm(0, "int32"), Store(O, j, A.load(t) + A.load(j)), Store(O, j, A.load(t - 1)))))
    func = PrimFunc("letv", (A, F, O), body, 2, 1)
    lib = build(func)
    a = RNG.standard_normal(2 * n + 1)
    for flag in (1, 0):
        o = np.zeros(n)
        lib.call("letv", a, np.array([flag], "int32"), o)
        ref = a[1::2][:n] + a[:n] if flag else a[0::2][:n]
        np.testing.assert_allclose(o, ref)


def test_bool_and_compare_lanes(build):
    n = 16
    A, O = Buffer("A", (n,), "float32"), Buffer("O", (n,), "bool")
    j = Var("j")
    func = PrimFunc("cmp", (A, O), For(j, IntImm(n), ForKind.VECTORIZED, Store(O, j, A.load(j) > 0.0)), 1, 1)
    a, o = RNG.standard_normal(n).astype("float32"), np.zeros(n, bool)
    build(func).call("cmp", a, o)
    np.testing.assert_array_equal(o, a > 0)


def test_vectorized_libm_and_cast(build):
    n = 8
    A, O = Buffer("A", (n,), "float32"), Buffer("O", (n,), "float64")
    j = Var("j")
    func = PrimFunc("erfv", (A, O), For(j, IntImm(n), ForKind.VECTORIZED, Store(
        O, j, cast("float64", call("erf", A.load(j)) + call("tanh", A.load(j))))), 1, 1)
    a, o = RNG.standard_normal(n).astype("float32"), np.zeros(n)
    build(func).call("erfv", a, o)
    ref = np.array([math.erf(x) for x in a], "float32") + np.tanh(a)
    np.testing.assert_allclose(o, ref, rtol=1e-6)


def test_fallback_keeps_semantics_and_asks_llvm(build):
    # A local buffer and a lane-dependent if cannot run as one vector: scalar loop + vectorize.enable.
    n = 16
    A, O = Buffer("A", (n,), "float32"), Buffer("O", (n,), "float32")
    tmp = Buffer("tmp", (1,), "float32", scope="local")
    j = Var("j")
    body = For(j, IntImm(n), ForKind.VECTORIZED, Allocate(tmp, seq(
        Store(tmp, IntImm(0), A.load(j) * 2.0),
        IfThenElse(A.load(j) > 0.0, Store(O, j, tmp.load(IntImm(0))), Store(O, j, FloatImm(0.0))))))
    func = PrimFunc("fb", (A, O), body, 1, 1)
    assert "llvm.loop.vectorize.enable" in lower_to_llvm_ir([func])
    a, o = RNG.standard_normal(n).astype("float32"), np.zeros(n, "float32")
    build(func).call("fb", a, o)
    np.testing.assert_allclose(o, np.where(a > 0, a * 2, 0))


def test_reduction_into_one_element_falls_back(build):
    n = 32
    A, S = Buffer("A", (n,), "float32"), Buffer("S", (1,), "float32")
    j = Var("j")
    body = seq(Store(S, IntImm(0), FloatImm(0.0)),
               For(j, IntImm(n), ForKind.VECTORIZED, Store(S, IntImm(0), S.load(IntImm(0)) + A.load(j))))
    func = PrimFunc("vsum", (A, S), body, 1, 1)
    a, s = RNG.standard_normal(n).astype("float32"), np.zeros(1, "float32")
    build(func).call("vsum", a, s)
    np.testing.assert_allclose(s[0], a.sum(), rtol=1e-5)


def test_target_lanes():
    assert get_target("x86-64-v3").lanes("float32") == 8
    assert get_target("x86-64-v4").lanes("float32") == 16


def test_loop_capped_by_a_length_stays_scalar_when_its_lanes_past_the_length_could_fault(build):
    """A vectorized loop of extent min(n, length) runs whole vectors past the length only when those lanes cannot
    fault; a division by a loaded divisor (0 past the length) or a gather at a loaded position stays a scalar loop
    that stops at the length."""
    from core.codegen.analysis import speculation_safe
    from core.tir.expr import binop

    n = 100  # above MAX_LANES: vectorized, it would run in chunks (j.vchunk)
    A, D, P, L, O = (Buffer("A", (n,), "int64"), Buffer("D", (n,), "int64"), Buffer("P", (n,), "int64"),
                     Buffer("L", (1,), "int64"), Buffer("O", (n,), "int64"))
    j = Var("j")
    body = Store(O, j, binop("floordiv", A.load(j), D.load(j)) + A.load(P.load(j)))
    assert not speculation_safe(body) and speculation_safe(Store(O, j, A.load(j) * 2))
    func = PrimFunc("capped", (A, D, P, L, O), For(j, binop("min", IntImm(n, "int64"), L.load(IntImm(0))),
                                                   ForKind.VECTORIZED, body), 1, 1)
    assert "j.vchunk" not in lower_to_llvm_ir([func])
    length = 13
    a = np.arange(1, n + 1, dtype=np.int64) * 7
    d = np.where(np.arange(n) < length, 3, 0).astype(np.int64)  # a division by 0 past the length would trap
    p = np.where(np.arange(n) < length, np.arange(n)[::-1], 10 ** 12).astype(np.int64)  # so would this gather
    o = np.full(n, -1, np.int64)
    build(func).call("capped", a, d, p, np.array([length], np.int64), o)
    want = np.full(n, -1, np.int64)
    want[:length] = a[:length] // 3 + a[p[:length]]
    np.testing.assert_array_equal(o, want)


def test_loop_capped_by_a_length_runs_whole_vectors_over_a_read_laid_out_at_that_length(build):
    """A transpose of keys laid out at their run-time length L (run-time strides, each read a select's arm under
    j < L, as core/te/run_time_layouts.py writes it): its vector loop of extent min(n, L + 1) runs in whole vectors
    up to the one crossing L + 1, since the reads past L are never made; a strided read outside a select is not."""
    from core.codegen.analysis import speculation_safe
    from core.tir.expr import binop

    n, d, rows = 96, 4, 2  # a length class of 96 keys, 4 features per key
    A, O = Buffer("A", (rows * n * d,), "float32"), Buffer("O", (rows * d * n,), "float32")
    L = Buffer("L", (1,), "int64")
    r, k, j = Var("r"), Var("k"), Var("j")
    length = L.load(IntImm(0))
    laid_out = A.load((r * length + j) * d + k)
    body = Store(O, (r * d + k) * n + j, select(binop("lt", j, length), laid_out, FloatImm(0.0)))
    assert speculation_safe(body) and not speculation_safe(Store(O, (r * d + k) * n + j, laid_out))
    capped = For(j, binop("min", IntImm(n, "int64"), length + 1), ForKind.VECTORIZED, body)
    func = PrimFunc("laid_out_transpose", (A, L, O), For(r, IntImm(rows), ForKind.SERIAL,
                                                         For(k, IntImm(d), ForKind.SERIAL, capped)), 1, 1)
    assert "j.vchunk" in lower_to_llvm_ir([func])
    lib = build(func)
    for keys in (0, 1, 7, 8, 40, 95, 96):  # past a vector's end, and the class's own size
        compact = RNG.standard_normal((rows, keys, d)).astype("float32")
        a = np.zeros(rows * n * d, "float32")  # the caller's compact array at the front, zeros behind it
        a[:compact.size] = compact.ravel()
        o = np.full((rows, d, n), -1, "float32")
        lib.call("laid_out_transpose", a, np.array([keys], np.int64), o)
        want = np.concatenate([compact.transpose(0, 2, 1), np.zeros((rows, d, 1), "float32")], axis=2)[..., :n]
        np.testing.assert_array_equal(o[..., :min(n, keys + 1)], want)
