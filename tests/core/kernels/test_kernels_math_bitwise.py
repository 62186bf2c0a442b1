"""Remainder, bit, rounding, sign, IsInf, BitCast and trigonometric kernels against ONNX's reference
implementation (onnx.reference) or numpy, over every integer and float dtype the ONNX ops accept."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from core.narrow_dtypes import int_range  # importing it teaches numpy bfloat16, float8 and int4 by name
from tests.helpers.kernel_runs import Case, assert_matches, run_cases

rng = np.random.default_rng(77)

INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
FLOATS = ("float16", "float32", "float64")


def onnx_ref(op_type: str, inputs, **attrs):
    """ONNX's own reference implementation of one node (it knows opset 28 ops ONNX Runtime lacks)."""
    def run():
        names = [f"x{k}" for k in range(len(inputs))]
        node = helper.make_node(op_type, names, ["y"], **attrs)
        graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                        for n, a in zip(names, inputs)]
        graph = helper.make_graph([node], "ref", graph_inputs,
                                  [helper.make_tensor_value_info("y", 0, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 28)])
        return ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))

    return run


def ints(dtype, shape, low=None, high=None):
    info = np.iinfo(dtype)
    low = max(info.min, -100) if low is None else low
    high = min(info.max, 100) if high is None else high
    return rng.integers(low, high, shape, endpoint=True, dtype=dtype)


CASES: list[Case] = []

# Mod: both sign conventions, negative operands, broadcasting, and integer extremes (x % -1 on INT_MIN).
for dtype in INTS:
    a, b = ints(dtype, (3, 4, 5)), ints(dtype, (4, 1), low=1 if dtype[0] == "u" else -9, high=9)
    b[b == 0] = 3
    for op, fmod in (("FloorMod", 0), ("TruncMod", 1)):
        CASES.append(Case(f"{op}_{dtype}", op, [a, b], {}, onnx_ref("Mod", [a, b], fmod=fmod)))
    if dtype[0] == "i":
        lo = np.iinfo(dtype).min
        edge_a, edge_b = np.array([lo, lo, 7, -7], dtype), np.array([-1, 3, -1, 2], dtype)
        for op, fmod in (("FloorMod", 0), ("TruncMod", 1)):
            CASES.append(Case(f"{op}_{dtype}_extremes", op, [edge_a, edge_b], {},
                              onnx_ref("Mod", [edge_a, edge_b], fmod=fmod)))
for dtype in FLOATS:
    a = (rng.uniform(-10, 10, (2, 3, 7)) ).astype(dtype)
    b = np.array([-3.5, -1.25, 2.0, 4.75, -0.5, 1.0, 3.0], dtype)
    CASES.append(Case(f"TruncMod_{dtype}", "TruncMod", [a, b], {}, onnx_ref("Mod", [a, b], fmod=1)))
    CASES.append(Case(f"FloorMod_{dtype}", "FloorMod", [a, b], {}, lambda a=a, b=b: [np.mod(a, b)]))
# fmod keeps tiny remainders exactly (a remainder formula through floor(a / b) would lose them).
_tiny = np.array([1e-10, -1e-10, 5.5, -5.5], np.float32)
_div = np.array([-5.0, 5.0, 5.0, 5.0], np.float32)
CASES.append(Case("TruncMod_tiny_remainder", "TruncMod", [_tiny, _div], {}, lambda: [np.fmod(_tiny, _div)],
                  rtol=0, atol=0))
_zero_div = np.array([7, -7, 0], np.int32), np.array([0, 0, 0], np.int32)
CASES.append(Case("FloorMod_by_zero_is_zero", "FloorMod", list(_zero_div), {}, lambda: [np.zeros(3, np.int32)]))

# BitShift: every width, shift amounts below 0 and at or beyond the bit width, negative inputs.
for dtype in INTS:
    bits = np.iinfo(dtype).bits
    a = ints(dtype, (4, 6), low=np.iinfo(dtype).min, high=np.iinfo(dtype).max)
    lo = 0 if dtype[0] == "u" else -3
    b = ints(dtype, (6,), low=lo, high=min(bits + 3, np.iinfo(dtype).max))
    b[:2] = [bits, bits - 1]
    for op, direction in (("BitShiftLeft", "LEFT"), ("BitShiftRight", "RIGHT")):
        CASES.append(Case(f"{op}_{dtype}", op, [a, b], {}, onnx_ref("BitShift", [a, b], direction=direction)))

# Bitwise ops on every integer width, broadcasting, and bool.
for dtype in INTS:
    info = np.iinfo(dtype)
    a, b = ints(dtype, (2, 3, 8), info.min, info.max), ints(dtype, (3, 1), info.min, info.max)
    for op, fn in (("BitwiseAnd", np.bitwise_and), ("BitwiseOr", np.bitwise_or), ("BitwiseXor", np.bitwise_xor)):
        CASES.append(Case(f"{op}_{dtype}", op, [a, b], {}, lambda fn=fn, a=a, b=b: [fn(a, b)]))
    CASES.append(Case(f"BitwiseNot_{dtype}", "BitwiseNot", [a], {}, lambda a=a: [np.invert(a)]))
_ba, _bb = rng.random((5, 7)) < 0.5, rng.random((7,)) < 0.5
CASES.append(Case("BitwiseXor_bool", "BitwiseXor", [_ba, _bb], {}, lambda: [_ba ^ _bb]))

# Rounding half to even, Sign keeping 0 and NaN, IsInf's two detections.
_halves = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49999997, -3.7, 1e8 + 0.5], np.float32)
CASES.append(Case("Round_half_even", "Round", [_halves], {}, lambda: [np.round(_halves)], rtol=0, atol=0))
_signs = np.array([-3.0, -0.0, 0.0, 2.5, np.nan, -np.inf, np.inf], np.float32)
CASES.append(Case("Sign_float", "Sign", [_signs], {}, lambda: [np.sign(_signs)]))
for dtype in ("int8", "int64", "uint16"):
    _x = ints(dtype, (9,), low=0 if dtype[0] == "u" else -4, high=4)
    CASES.append(Case(f"Sign_{dtype}", "Sign", [_x], {}, lambda _x=_x: [np.sign(_x)]))
_infs = np.array([np.inf, -np.inf, np.nan, 0.0, 3.4e38, -1.0], np.float32)
for pos in (True, False):
    for neg in (True, False):
        _want = (np.isposinf(_infs) & pos) | (np.isneginf(_infs) & neg)
        CASES.append(Case(f"IsInf_{int(pos)}{int(neg)}", "IsInf", [_infs],
                          {"detect_positive": pos, "detect_negative": neg}, lambda _want=_want: [_want]))
_infs64 = _infs.astype(np.float64)
CASES.append(Case("IsInf_float64", "IsInf", [_infs64], {}, lambda: [np.isinf(_infs64)]))

# BitCast between every pair of same-size dtypes the ONNX tests use (bool included).
for src, dst, make in (("float32", "int32", lambda: rng.standard_normal((3, 5)).astype(np.float32)),
                       ("int32", "float32", lambda: ints("int32", (3, 5), -2**31, 2**31 - 1)),
                       ("float64", "int64", lambda: rng.standard_normal((2, 9)).astype(np.float64)),
                       ("int64", "float64", lambda: ints("int64", (4,), -2**40, 2**40)),
                       ("float16", "uint16", lambda: rng.standard_normal((7,)).astype(np.float16)),
                       ("uint16", "int16", lambda: ints("uint16", (7,), 0, 65535)),
                       ("int8", "uint8", lambda: ints("int8", (2, 8), -128, 127)),
                       ("bool", "uint8", lambda: rng.random((11,)) < 0.5),
                       # narrow dtypes keep their bit patterns in memory (ml_dtypes names)
                       ("bfloat16", "int16", lambda: rng.standard_normal((9,)).astype("bfloat16")),
                       ("int16", "bfloat16", lambda: ints("int16", (9,), 0x3F00, 0x4100)),
                       ("float8_e4m3fn", "uint8", lambda: rng.standard_normal((9,)).astype("float8_e4m3fn")),
                       ("uint8", "float8_e5m2", lambda: ints("uint8", (9,), 0, 0x7B)),
                       ("int4", "uint4", lambda: ints("int8", (9,), *int_range("int4")).astype("int4"))):
    _x = make()
    CASES.append(Case(f"BitCast_{src}_{dst}", "BitCast", [_x], {"to": dst}, lambda _x=_x, dst=dst: [_x.view(dst)],
                      rtol=0, atol=0))

# Trigonometric and hyperbolic functions inside each one's domain, in every float width.
_DOMAINS = {"Sin": (-7, 7, np.sin), "Cos": (-7, 7, np.cos), "Tan": (-1.4, 1.4, np.tan), "Asin": (-1, 1, np.arcsin),
            "Acos": (-1, 1, np.arccos), "Atan": (-20, 20, np.arctan), "Sinh": (-9, 9, np.sinh),
            "Cosh": (-9, 9, np.cosh), "Asinh": (-50, 50, np.arcsinh), "Acosh": (1, 50, np.arccosh),
            "Atanh": (-0.99, 0.99, np.arctanh)}
for op, (low, high, fn) in _DOMAINS.items():
    for dtype, tol in (("float32", 2e-6), ("float64", 1e-12), ("float16", 2e-3)):
        _x = rng.uniform(low, high, (3, 37)).astype(dtype)
        CASES.append(Case(f"{op}_{dtype}", op, [_x], {}, lambda fn=fn, _x=_x: [fn(_x)], rtol=tol, atol=tol * 1e-2,
                          unscheduled_too=dtype == "float32"))


@pytest.fixture(scope="module")
def results():
    return run_cases(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_matches_reference(case, results):
    expected = case.reference()
    for outputs in results[case.id]:
        assert_matches(case, outputs, expected)


def test_case_ids_are_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
