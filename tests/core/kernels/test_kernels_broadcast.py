"""Binary broadcast kernels and Where against ONNX Runtime, over shapes and dtypes the models use."""
from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.kernel_runs import Case, assert_matches, onnx_reference, run_cases

rng = np.random.default_rng(99)

SHAPE_PAIRS = [((2, 3, 17), (2, 3, 17)), ((2, 3, 17), (17,)), ((4, 1, 9), (3, 1)), ((1,), (5, 6)),
               ((1, 64, 13, 13), (64, 1, 1)), ((2, 1, 1, 8), (1, 5, 7, 1)), ((), (3, 4))]
ARITH = ("Add", "Sub", "Mul", "Div", "Max", "Min")
COMPARE = ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual")


def data(shape, dtype):
    if dtype == "bool":
        return np.asarray(rng.random(shape) < 0.5)
    if np.dtype(dtype).kind == "i":
        return np.asarray(rng.integers(-20, 20, shape), dtype)
    # Few distinct values so that Equal and the ordered comparisons see ties.
    return np.asarray(rng.integers(-8, 8, shape) / 4, dtype)


def case(op, a, b):
    name = f"{op}_{'x'.join(map(str, a.shape)) or 's'}_{'x'.join(map(str, b.shape)) or 's'}_{a.dtype}"
    return Case(name, op, [a, b], {}, lambda: onnx_reference(op, [a, b]))


CASES: list[Case] = []
for sa, sb in SHAPE_PAIRS:
    for op in ARITH + COMPARE:
        b = data(sb, "float32")
        if op == "Div":
            b[b == 0] = 0.75
        CASES.append(case(op, data(sa, "float32"), b))
for sa, sb in SHAPE_PAIRS[:4]:
    for op in ARITH + ("Equal", "Less", "GreaterOrEqual"):
        a, b = data(sa, "int64"), data(sb, "int64")
        if op == "Div":
            b[b == 0] = 3  # integer division truncates toward zero, negative operands included
        CASES.append(case(op, a, b))
    for op in ("And", "Or", "Equal"):
        CASES.append(case(op, data(sa, "bool"), data(sb, "bool")))
CASES.append(case("Add", data((3, 33), "int32"), data((33,), "int32")))
CASES.append(case("Mul", data((3, 33), "int32"), data((3, 1), "int32")))
CASES.append(case("Pow", np.abs(data((2, 3, 17), "float32")) + 0.5, data((17,), "float32")))
CASES.append(case("Pow", data((4, 9), "float32"), np.array(2.0, np.float32)))
_exp = np.array(3, np.int64)
CASES.append(Case("Pow_int_exponent", "Pow", [_b := data((5, 7), "float32"), _exp], {},
                  lambda: onnx_reference("Pow", [_b, _exp])))


def where_case(cid, cond, x, y):
    return Case(cid, "Where", [cond, x, y], {}, lambda: onnx_reference("Where", [cond, x, y]))


CASES += [where_case("Where_same", data((3, 17), "bool"), data((3, 17), "float32"), data((3, 17), "float32")),
          where_case("Where_broadcast", data((1, 1, 64, 64), "bool"), data((1, 2, 64, 64), "float32"),
                     np.array(-1e9, np.float32)),
          where_case("Where_int64", data((5, 1), "bool"), data((1, 6), "int64"), data((5, 6), "int64")),
          Case("Where_bool_values", "Where", [_c := data((4, 8), "bool"), _t := data((4, 8), "bool"),
                                             _f := data((8,), "bool")], {},
               lambda: [np.where(_c, _t, _f)])]  # ONNX Runtime has no bool Where


@pytest.fixture(scope="module")
def results():
    return run_cases(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_binary_matches_onnxruntime(case, results):
    expected = case.reference()
    for outputs in results[case.id]:
        assert_matches(case, outputs, expected)


def test_variadic_max_min_sum():
    a, b, c = data((3, 5), "float32"), data((5,), "float32"), data((3, 1), "float32")
    cases = [Case(f"{op}_3", op, [a, b, c], {}, lambda op=op: onnx_reference(op, [a, b, c])) for op in ("Max", "Min")]
    out = run_cases(cases)
    for cs in cases:
        assert_matches(cs, out[cs.id][0], cs.reference())


def test_case_ids_are_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
