"""Every TIR expression kind, per dtype, compiled to a library and compared with numpy."""
from __future__ import annotations

import numpy as np
import pytest

from core.tir import Cast, Not, call, cast, const, eq, logical_and, logical_or, maximum, minimum, ne, select
from core.tir.expr import BinOp

RNG = np.random.default_rng(7)
N = 37  # not a multiple of any vector width, so remainders are exercised too


def ints(dtype, lo=-100, hi=100, n=N):
    return RNG.integers(lo, hi, size=n).astype(dtype)


def floats(dtype, n=N):
    return (RNG.standard_normal(n) * 3).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "uint32"])
@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_arithmetic(run_elementwise, dtype, op):
    if dtype.startswith("float"):
        a, b = floats(dtype), floats(dtype)
    else:
        lo = 0 if dtype.startswith("u") else -100
        a, b = ints(dtype, lo, 120), ints(dtype, lo, 120)
    fn = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y}[op]
    with np.errstate(over="ignore"):
        ref = fn(a, b)  # wraps for small ints (int8 * int8), like the kernel must
    out = run_elementwise(fn, [a, b], dtype)
    if dtype.startswith("float"):
        np.testing.assert_allclose(out, ref, rtol=1e-6 if dtype != "float16" else 1e-3)
    else:
        np.testing.assert_array_equal(out, ref)


def test_float_div_is_ieee(run_elementwise):
    a = np.array([1, -1, 0, 3, 7.5, np.inf], dtype="float32")
    b = np.array([0, 0, 0, -2, 2.5, 2], dtype="float32")
    with np.errstate(divide="ignore", invalid="ignore"):
        ref = a / b
    np.testing.assert_array_equal(run_elementwise(lambda x, y: x / y, [a, b], "float32"), ref)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_int_div_truncates_toward_zero(run_elementwise, dtype):
    a = np.array([7, -7, 7, -7, 0, 100, -101], dtype=dtype)
    b = np.array([2, 2, -2, -2, 3, 7, 10], dtype=dtype)
    ref = (np.trunc(a.astype(float) / b)).astype(dtype)
    np.testing.assert_array_equal(run_elementwise(lambda x, y: BinOp("div", x, y), [a, b], dtype), ref)


@pytest.mark.parametrize("dtype", ["int32", "int64", "int16"])
def test_floordiv_floormod_variable_divisor(run_elementwise, dtype):
    a = ints(dtype, -50, 50)
    b = ints(dtype, -9, 9)
    b[b == 0] = 3
    np.testing.assert_array_equal(run_elementwise(lambda x, y: x // y, [a, b], dtype), a // b)
    np.testing.assert_array_equal(run_elementwise(lambda x, y: x % y, [a, b], dtype), a % b)


@pytest.mark.parametrize("divisor", [1, 2, 3, 7, 8, 64, -3, -8])
def test_floordiv_floormod_constant_divisor(run_elementwise, divisor):
    a = np.arange(-40, 40, dtype="int64")
    np.testing.assert_array_equal(run_elementwise(lambda x: x // divisor, [a], "int64"), a // divisor)
    np.testing.assert_array_equal(run_elementwise(lambda x: x % divisor, [a], "int64"), a % divisor)


def test_unsigned_floordiv(run_elementwise):
    a = np.array([0, 5, 200, 255, 17], dtype="uint8")
    b = np.array([1, 2, 7, 16, 255], dtype="uint8")
    np.testing.assert_array_equal(run_elementwise(lambda x, y: x // y, [a, b], "uint8"), a // b)
    np.testing.assert_array_equal(run_elementwise(lambda x, y: x % y, [a, b], "uint8"), a % b)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_floordiv_floormod(run_elementwise, dtype):
    a = np.array([7.5, -7.5, 7.5, -7.5, 0.25, -3.0, 6.0], dtype=dtype)
    b = np.array([2, 2, -2, -2, 0.5, 1.5, -3.0], dtype=dtype)
    np.testing.assert_allclose(run_elementwise(lambda x, y: x // y, [a, b], dtype), a // b)
    np.testing.assert_allclose(run_elementwise(lambda x, y: x % y, [a, b], dtype), np.mod(a, b), atol=1e-12)


def test_float_min_max_propagate_nan(run_elementwise):
    a = np.array([1, np.nan, 3, -0.5, np.nan, 2], dtype="float32")
    b = np.array([2, 1, np.nan, -0.25, np.nan, 2], dtype="float32")
    np.testing.assert_array_equal(run_elementwise(minimum, [a, b], "float32"), np.minimum(a, b))
    np.testing.assert_array_equal(run_elementwise(maximum, [a, b], "float32"), np.maximum(a, b))


@pytest.mark.parametrize("dtype", ["int8", "int64", "uint8", "uint64"])
def test_int_min_max(run_elementwise, dtype):
    lo, hi = (0, 250) if dtype.startswith("u") else (-120, 120)
    a, b = ints(dtype, lo, hi), ints(dtype, lo, hi)
    np.testing.assert_array_equal(run_elementwise(minimum, [a, b], dtype), np.minimum(a, b))
    np.testing.assert_array_equal(run_elementwise(maximum, [a, b], dtype), np.maximum(a, b))


def test_pow(run_elementwise):
    a = np.abs(floats("float32")) + 0.1
    b = floats("float32")
    pow_ = lambda x, y: BinOp("pow", x, y)  # noqa: E731
    np.testing.assert_allclose(run_elementwise(pow_, [a, b], "float32"), a ** b, rtol=1e-5)
    ia, ib = ints("int32", -5, 6), ints("int32", 0, 7)
    np.testing.assert_array_equal(run_elementwise(pow_, [ia, ib], "int32"), ia ** ib)


@pytest.mark.parametrize("dtype", ["float32", "int32", "uint16"])
def test_comparisons(run_elementwise, dtype):
    if dtype == "float32":
        a, b = floats(dtype), floats(dtype)
        a[::5] = b[::5]
        a[3], b[7] = np.nan, np.nan
    else:
        lo = 0 if dtype.startswith("u") else -5
        a, b = ints(dtype, lo, 5), ints(dtype, lo, 5)
    ops = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
           "ge": np.greater_equal}
    for op, ref in ops.items():
        out = run_elementwise(lambda x, y, op=op: BinOp(op, x, y), [a, b], "bool")
        np.testing.assert_array_equal(out, ref(a, b), err_msg=op)


def test_logical_ops_and_not(run_elementwise):
    a, b = RNG.random(N) < 0.5, RNG.random(N) < 0.5
    np.testing.assert_array_equal(run_elementwise(logical_and, [a, b], "bool"), a & b)
    np.testing.assert_array_equal(run_elementwise(logical_or, [a, b], "bool"), a | b)
    np.testing.assert_array_equal(run_elementwise(lambda x: Not(x), [a], "bool"), ~a)
    x = ints("int32", -2, 3)  # logical ops accept ints as truth values
    np.testing.assert_array_equal(run_elementwise(lambda v, w: logical_and(v, w), [x, a], "bool"), (x != 0) & a)


def test_select(run_elementwise):
    c = RNG.random(N) < 0.5
    a, b = floats("float64"), floats("float64")
    np.testing.assert_array_equal(run_elementwise(select, [c, a, b], "float64"), np.where(c, a, b))
    x = floats("float32")
    out = run_elementwise(lambda v: select(v > 0, v, v * 0.5), [x], "float32")
    np.testing.assert_allclose(out, np.where(x > 0, x, x * np.float32(0.5)))


@pytest.mark.parametrize("src,dst", [
    ("float32", "int32"), ("float32", "int8"), ("float32", "uint8"), ("float64", "int64"), ("float32", "uint32"),
    ("int32", "float32"), ("int64", "float64"), ("uint8", "float32"), ("int32", "int8"), ("int8", "int64"),
    ("uint8", "int32"), ("int16", "uint16"), ("float32", "float16"), ("float16", "float32"), ("float64", "float32"),
    ("float32", "float64"), ("bool", "float32"), ("bool", "int32"), ("float32", "bool"), ("int32", "bool"),
])
def test_cast(run_elementwise, src, dst):
    if src == "bool":
        a = RNG.random(N) < 0.5
    elif src.startswith("float"):
        a = floats(src) * 10
        if dst.startswith("u"):
            a = np.abs(a)  # negative floats to unsigned are undefined in C (and differ by platform in numpy)
        if dst == "bool":
            a[::4] = 0
            a[5] = np.nan
    else:
        a = ints(src, 0 if src.startswith("u") else -120, 120)
    with np.errstate(invalid="ignore"):
        ref = a.astype(dst)
    out = run_elementwise(lambda x: cast(dst, x), [a], dst)
    if dst.startswith("float"):
        np.testing.assert_allclose(out, ref, rtol=1e-6)
    else:
        np.testing.assert_array_equal(out, ref)


def test_float_to_int_truncates(run_elementwise):
    a = np.array([2.9, -2.9, 0.5, -0.5, 1e6 + 0.7], dtype="float32")
    np.testing.assert_array_equal(run_elementwise(lambda x: cast("int32", x), [a], "int32"), a.astype("int32"))


def test_bfloat16_cast_and_add(run_elementwise):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = floats("float32")
    a[3] = np.nan
    ref = a.astype(ml_dtypes.bfloat16)
    out = run_elementwise(lambda x: cast("bfloat16", x), [a], "bfloat16")
    np.testing.assert_array_equal(out.view(np.uint16), ref.view(np.uint16) | np.where(np.isnan(a), 0x40, 0).astype(np.uint16))
    x, y = floats("float32").astype(ml_dtypes.bfloat16), floats("float32").astype(ml_dtypes.bfloat16)
    out = run_elementwise(lambda p, q: p + q * q, [x, y], "bfloat16")
    np.testing.assert_array_equal(out.astype("float32"), (x + y * y).astype("float32"))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "erf", "tanh", "abs", "floor", "ceil", "round", "sin", "cos",
                                  "trunc"])
def test_intrinsics(run_elementwise, dtype, name):
    import math
    a = floats(dtype)
    if name in ("log", "sqrt"):
        a = np.abs(a) + 0.01
    if name == "round":
        a = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49, 2.51, -3.7], dtype=dtype)
    refs = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "abs": np.abs, "floor": np.floor,
            "ceil": np.ceil, "round": np.round, "sin": np.sin, "cos": np.cos, "trunc": np.trunc,
            "erf": np.vectorize(math.erf)}
    out = run_elementwise(lambda x: call(name, x), [a], dtype)
    np.testing.assert_allclose(out, refs[name](a).astype(dtype), rtol=2e-6 if dtype == "float32" else 1e-12, atol=1e-7)


def test_isnan_and_int_abs(run_elementwise):
    a = floats("float32")
    a[[1, 4, 9]] = np.nan
    np.testing.assert_array_equal(run_elementwise(lambda x: call("isnan", x), [a], "bool"), np.isnan(a))
    i = ints("int32")
    np.testing.assert_array_equal(run_elementwise(lambda x: call("abs", x), [i], "int32"), np.abs(i))


def test_float16_math(run_elementwise):
    a = floats("float16") / 2
    out = run_elementwise(lambda x: call("exp", x) * x + x, [a], "float16")
    ref = np.exp(a) * a + a
    np.testing.assert_allclose(out.astype("float32"), ref.astype("float32"), rtol=3e-3, atol=1e-3)
    out = run_elementwise(lambda x: call("tanh", x), [a], "float16")
    np.testing.assert_allclose(out.astype("float32"), np.tanh(a).astype("float32"), rtol=2e-3, atol=1e-3)


def test_constants_of_each_dtype(run_elementwise):
    a = ints("int8", -100, 100)
    out = run_elementwise(lambda x: x + const(-128, "int8") + const(300, "int8"), [a], "int8")
    np.testing.assert_array_equal(out, (a.astype(np.int64) - 128 + 300).astype(np.int8))
    b = ints("uint64", 0, 1000)
    out = run_elementwise(lambda x: select(ne(x, const(5, "uint64")), x * const(2 ** 63, "uint64"), x), [b], "uint64")
    np.testing.assert_array_equal(out, np.where(b != 5, b * np.uint64(2 ** 63), b))


def test_nested_cast_chain(run_elementwise):
    a = floats("float32") * 100
    out = run_elementwise(lambda x: Cast("float32", Cast("int16", Cast("float64", x))), [a], "float32")
    np.testing.assert_array_equal(out, a.astype("float64").astype("int16").astype("float32"))
    out = run_elementwise(lambda x: cast("int32", eq(x, x)), [a], "int32")
    np.testing.assert_array_equal(out, np.ones(N, "int32"))
