"""Statements: reductions, loop nests with let/if, local buffers, unrolling, guarded loads."""
from __future__ import annotations

import numpy as np
import pytest

from core.codegen import lower_to_llvm_ir, optimized_llvm_ir
from core.errors import CodegenError
from core.tir import (Allocate, Buffer, FloatImm, For, ForKind, IfThenElse, IntImm, LetStmt, PrimFunc, Store, Var,
                      cast, logical_and, select, seq)

RNG = np.random.default_rng(3)


def test_row_sum_reduction(build):
    m, n = 13, 29
    A, S = Buffer("A", (m, n), "float32"), Buffer("S", (m,), "float32")
    i, k = Var("i"), Var("k")
    body = For(i, IntImm(m), ForKind.SERIAL, seq(
        Store(S, i, FloatImm(0.0)),
        For(k, IntImm(n), ForKind.SERIAL, Store(S, i, S.load(i) + A.load(i * n + k)))))
    lib = build(PrimFunc("rowsum", (A, S), body, 1, 1))
    a, s = RNG.standard_normal((m, n)).astype("float32"), np.zeros(m, "float32")
    lib.call("rowsum", a, s)
    np.testing.assert_allclose(s, a.sum(axis=1), rtol=1e-5)


def test_loop_nest_with_let_and_if(build):
    # out[i, j] = (i >= j) ? A[i, j] * 2 : -1 (lower triangle), with the row offset bound by a let.
    m, n = 9, 11
    A, O = Buffer("A", (m, n), "float64"), Buffer("O", (m, n), "float64")
    i, j, row = Var("i"), Var("j"), Var("row")
    body = For(i, IntImm(m), ForKind.SERIAL, LetStmt(row, i * n, For(j, IntImm(n), ForKind.SERIAL, IfThenElse(
        i >= j, Store(O, row + j, A.load(row + j) * 2.0), Store(O, row + j, FloatImm(-1.0, "float64"))))))
    lib = build(PrimFunc("tri", (A, O), body, 1, 1))
    a, o = RNG.standard_normal((m, n)), np.zeros((m, n))
    lib.call("tri", a, o)
    ii, jj = np.indices((m, n))
    np.testing.assert_array_equal(o, np.where(ii >= jj, a * 2, -1))


def test_if_without_else_and_nested_lets(build):
    n = 20
    A, O = Buffer("A", (n,), "int32"), Buffer("O", (n,), "int32")
    i, x, y = Var("i"), Var("x", "int32"), Var("y", "int32")
    body = For(i, IntImm(n), ForKind.SERIAL, seq(
        Store(O, i, IntImm(0, "int32")),
        LetStmt(x, A.load(i) * 3, LetStmt(y, x + 1, IfThenElse(y > IntImm(10, "int32"), Store(O, i, y))))))
    lib = build(PrimFunc("lets", (A, O), body, 1, 1))
    a, o = RNG.integers(-5, 10, n).astype("int32"), np.ones(n, "int32")
    lib.call("lets", a, o)
    np.testing.assert_array_equal(o, np.where(a * 3 + 1 > 10, a * 3 + 1, 0))


def test_allocate_local_scratch(build):
    # Reverse each row through a local buffer: tmp[k] = A[i, k]; O[i, k] = tmp[n-1-k] + tmp[k].
    m, n = 5, 16
    A, O = Buffer("A", (m, n), "float32"), Buffer("O", (m, n), "float32")
    tmp = Buffer("tmp", (n,), "float32", scope="local")
    i, k, k2 = Var("i"), Var("k"), Var("k2")
    body = For(i, IntImm(m), ForKind.SERIAL, Allocate(tmp, seq(
        For(k, IntImm(n), ForKind.SERIAL, Store(tmp, k, A.load(i * n + k))),
        For(k2, IntImm(n), ForKind.SERIAL, Store(O, i * n + k2, tmp.load(n - 1 - k2) + tmp.load(k2))))))
    lib = build(PrimFunc("rev", (A, O), body, 1, 1))
    a, o = RNG.standard_normal((m, n)).astype("float32"), np.zeros((m, n), "float32")
    lib.call("rev", a, o)
    np.testing.assert_allclose(o, a[:, ::-1] + a)
    assert "alloca [16 x float]" in lower_to_llvm_ir([PrimFunc("rev", (A, O), body, 1, 1)])


def test_unrolled_loop(build):
    n = 8
    A, O = Buffer("A", (4 * n,), "float32"), Buffer("O", (n,), "float32")
    i, u = Var("i"), Var("u")
    body = For(i, IntImm(n), ForKind.SERIAL, seq(
        Store(O, i, FloatImm(0.0)),
        For(u, IntImm(4), ForKind.UNROLLED, Store(O, i, O.load(i) + A.load(i * 4 + u) * cast("float32", u + 1)))))
    func = PrimFunc("unr", (A, O), body, 1, 1)
    text = lower_to_llvm_ir([func])
    assert "u.head" not in text  # fully unrolled: no loop for u
    a, o = RNG.standard_normal(4 * n).astype("float32"), np.zeros(n, "float32")
    build(func).call("unr", a, o)
    np.testing.assert_allclose(o, (a.reshape(n, 4) * np.arange(1, 5)).sum(axis=1), rtol=1e-5)


def test_int32_loop_variable_and_symbolic_bounds(build):
    n = 10
    A, O = Buffer("A", (n,), "float32"), Buffer("O", (n,), "float32")
    i = Var("i", "int32")
    body = For(i, IntImm(n, "int32"), ForKind.SERIAL, Store(O, i, A.load(cast("int64", i)) + cast("float32", i)))
    a, o = RNG.standard_normal(n).astype("float32"), np.zeros(n, "float32")
    build(PrimFunc("i32", (A, O), body, 1, 1)).call("i32", a, o)
    np.testing.assert_allclose(o, a + np.arange(n))


def test_guarded_load_is_not_speculated(build):
    # The untaken arm indexes far outside A: evaluating it would fault. Padding-style code relies on this.
    n = 12
    A, O = Buffer("A", (n,), "float32"), Buffer("O", (n,), "float32")
    i = Var("i")
    far = i + 10 ** 12
    in_select = For(i, IntImm(n), ForKind.SERIAL, Store(O, i, select(i < n, A.load(i), A.load(far))))
    # logical_and short-circuits for the same reason.
    in_and = For(i, IntImm(n), ForKind.SERIAL, Store(O, i, select(logical_and(i >= n, A.load(far) > 0),
                                                                   FloatImm(1.0), A.load(i))))
    lib = build([PrimFunc("guard", (A, O), in_select, 1, 1), PrimFunc("guard_and", (A, O), in_and, 1, 1)])
    a = RNG.standard_normal(n).astype("float32")
    for name in ("guard", "guard_and"):
        o = np.zeros(n, "float32")
        lib.call(name, a, o)
        np.testing.assert_array_equal(o, a)


def test_several_kernels_in_one_library(build):
    n = 8
    A, B = Buffer("A", (n,), "int64"), Buffer("B", (n,), "int64")
    i = Var("i")
    f1 = PrimFunc("inc", (A, B), For(i, IntImm(n), ForKind.SERIAL, Store(B, i, A.load(i) + 1)), 1, 1)
    f2 = PrimFunc("dbl", (A, B), For(i, IntImm(n), ForKind.SERIAL, Store(B, i, A.load(i) * 2)), 1, 1)
    lib = build([f1, f2])
    assert set(lib.names) == {"inc", "dbl"}
    a, b = np.arange(n), np.zeros(n, "int64")
    lib.call("inc", a, b)
    np.testing.assert_array_equal(b, a + 1)
    lib.call("dbl", a, b)
    np.testing.assert_array_equal(b, a * 2)
    assert lib.time_ms("dbl", a, b, repeat=3) > 0
    with pytest.raises(ValueError, match="elements"):
        lib.call("dbl", a[:3].copy(), b)
    with pytest.raises(ValueError, match="dtype"):
        lib.call("dbl", a.astype("int32"), b)
    with pytest.raises(KeyError, match="nope"):
        lib.call("nope", a, b)


def test_codegen_errors_are_typed():
    n = 4
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "int32")
    i, j = Var("i"), Var("j")
    wrong_dtype = PrimFunc("bad", (A, B), For(i, IntImm(n), ForKind.SERIAL, Store(B, i, A.load(i))), 1, 1)
    with pytest.raises(CodegenError, match="Cast"):
        lower_to_llvm_ir([wrong_dtype])
    unbound = PrimFunc("bad2", (A,), For(i, IntImm(n), ForKind.SERIAL, Store(A, j, FloatImm(0.0))), 0, 1)
    with pytest.raises(CodegenError, match="outside its scope"):
        lower_to_llvm_ir([unbound])
    stranger = Buffer("C", (n,), "float32")
    unknown_buf = PrimFunc("bad3", (A,), For(i, IntImm(n), ForKind.SERIAL, Store(A, i, stranger.load(i))), 1, 0)
    with pytest.raises(CodegenError, match="C"):
        lower_to_llvm_ir([unknown_buf])
    with pytest.raises(CodegenError, match="reserved|C symbol"):
        lower_to_llvm_ir([PrimFunc("kiln_run", (A,), Store(A, IntImm(0), FloatImm(1.0)), 0, 1)])
    with pytest.raises(CodegenError, match="share"):
        f = PrimFunc("twice", (A,), Store(A, IntImm(0), FloatImm(1.0)), 0, 1)
        lower_to_llvm_ir([f, f])


def test_kernel_params_are_noalias_and_unaligned():
    n = 64
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    i = Var("i")
    text = optimized_llvm_ir([PrimFunc("cp", (A, B), For(i, IntImm(n), ForKind.SERIAL, Store(B, i, A.load(i))), 1, 1)])
    assert "noalias" in text and "dereferenceable(256)" in text
    assert "align 64" not in text.split("define void @cp")[1].split("\n")[0]


def test_unaligned_pointers_work(build):
    # Model inputs are the caller's pointers: the kernels must not assume 64-byte alignment.
    n = 40
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    i = Var("i")
    body = For(i, IntImm(n), ForKind.VECTORIZED, Store(B, i, A.load(i) * 2.0))
    lib = build(PrimFunc("scale", (A, B), body, 1, 1))
    raw_a, raw_b = np.zeros(n + 3, "float32"), np.zeros(n + 3, "float32")
    a, b = raw_a[1:n + 1], raw_b[3:n + 3]  # 4 and 12 bytes off any vector alignment
    a[:] = RNG.standard_normal(n)
    lib.call("scale", a, b)
    np.testing.assert_allclose(b, a * 2)


def test_pragma_unroll_annotation_is_llvm_loop_metadata(build):
    # A serial loop annotated ("pragma_unroll", 3) stays one loop in TIR; LLVM gets unroll.count 3 on
    # its latch (the remainder of 10 = 3 * 3 + 1 handled by LLVM), and the result is unchanged.
    n = 10
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    i = Var("i")
    loop = For(i, IntImm(n), ForKind.SERIAL, Store(B, i, A.load(i) * 3.0), (("pragma_unroll", 3),))
    func = PrimFunc("prag", (A, B), loop, 1, 1)
    text = lower_to_llvm_ir([func])
    assert '!"llvm.loop.unroll.count", i32 3' in text and "!llvm.loop" in text
    a, b = RNG.standard_normal(n).astype("float32"), np.zeros(n, "float32")
    build(func).call("prag", a, b)
    np.testing.assert_allclose(b, a * 3, rtol=1e-6)
    with pytest.raises(CodegenError, match="unknown loop annotation"):
        lower_to_llvm_ir([PrimFunc("bad", (A, B), For(i, IntImm(n), ForKind.SERIAL, Store(B, i, A.load(i)),
                                                      (("pragma_nope", 1),)), 1, 1)])
