"""Unary elementwise kernels against ONNX Runtime: activations, math, Cast, Clip, IsNaN, Not."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from tests.helpers.kernel_runs import Case, assert_matches, onnx_reference, run_cases

rng = np.random.default_rng(1234)


def f32(*shape, low=-3.0, high=3.0):
    return rng.uniform(low, high, shape).astype(np.float32)


def ort(op, inputs, **attrs):
    return lambda: onnx_reference(op, inputs, attrs)


def unary(op, x, cid=None, **kw):
    return Case(cid or f"{op}_{'x'.join(map(str, x.shape))}_{x.dtype}", op, [x], {}, ort(op, [x]), **kw)


SHAPES = [(2, 3, 5), (1, 16, 7, 9), (4, 64)]
CASES: list[Case] = []
for shape in SHAPES:
    for op in ("Relu", "Sigmoid", "Tanh", "Erf", "Exp", "Neg", "Abs", "Floor", "Ceil", "Identity"):
        CASES.append(unary(op, f32(*shape), rtol=2e-6, atol=1e-6))
for op in ("Sqrt", "Log", "Reciprocal"):
    CASES.append(unary(op, f32(3, 37, low=0.1, high=10.0), rtol=2e-6))
# Erf on a dense grid including the tails, where the rational approximation switches to +-1.
_grid = np.linspace(-6, 6, 4099, dtype=np.float32).reshape(1, 4099)
CASES.append(unary("Erf", _grid, "Erf_grid", atol=5e-7, rtol=0))
CASES.append(unary("Exp", f32(3, 41, low=-80, high=80), "Exp_wide", rtol=2e-6))
# Tanh's rational approximation over its whole range: tiny values (returned as x), the polynomial's
# domain, the clamp to +-1, and inf/NaN; then through float32 for float16, and libm for float64.
_tanh_grid = np.concatenate([np.linspace(-12, 12, 6001), np.geomspace(1e-9, 0.01, 400), -np.geomspace(1e-9, 0.01, 400),
                             [np.inf, -np.inf, np.nan, 0.0, 4e-4, -4e-4]]).astype(np.float32).reshape(1, -1)
CASES.append(Case("Tanh_grid", "Tanh", [_tanh_grid], {},
                  lambda: [np.tanh(_tanh_grid.astype(np.float64)).astype(np.float32)], rtol=6e-7, atol=0,
                  unscheduled_too=True))
for _op, _fn in (("Tanh", np.tanh), ("Erf", np.vectorize(__import__("math").erf))):
    for _dtype, _tol in (("float16", 1e-3), ("float64", 1e-12)):
        _v = rng.uniform(-5, 5, (3, 29)).astype(_dtype)
        CASES.append(Case(f"{_op}_{_dtype}", _op, [_v], {},
                          lambda _v=_v, _fn=_fn: [_fn(_v.astype(np.float64)).astype(_v.dtype)], rtol=_tol, atol=_tol))
# Integer and bool inputs of ops the models use on them.
_ints = rng.integers(-50, 50, (3, 17)).astype(np.int64)
CASES += [unary("Abs", _ints), unary("Neg", _ints), unary("Relu", rng.integers(-5, 5, (2, 9)).astype(np.int32)),
          unary("Identity", _ints)]
_bools = rng.random((4, 33)) < 0.5
CASES.append(unary("Not", _bools))
_nan = f32(5, 19)
_nan[_nan > 1.5] = np.nan
_nan[0, 0] = np.inf
CASES.append(unary("IsNaN", _nan))


def cast_case(x, to):
    to_proto = {"float32": TensorProto.FLOAT, "int64": TensorProto.INT64, "int32": TensorProto.INT32,
                "bool": TensorProto.BOOL, "float64": TensorProto.DOUBLE, "uint8": TensorProto.UINT8}[to]
    return Case(f"Cast_{x.dtype}_to_{to}", "Cast", [x], {"to": to}, ort("Cast", [x], to=to_proto))


_cast_floats = np.round(f32(3, 23, low=-100, high=100), 1)
_cast_floats[0, :4] = [0.0, -0.0, 0.5, -0.7]
CASES += [cast_case(_cast_floats, "int64"), cast_case(_cast_floats, "int32"), cast_case(_cast_floats, "bool"),
          cast_case(_cast_floats, "float64"), cast_case(_ints, "float32"), cast_case(_ints, "int32"),
          cast_case(_ints, "bool"), cast_case(_bools, "float32"), cast_case(_bools, "int64"),
          cast_case(rng.integers(0, 255, (2, 40)).astype(np.uint8), "float32")]


def clip_case(cid, x, lo, hi):
    bounds = [None if v is None else np.array(v, x.dtype) for v in (lo, hi)]
    while bounds and bounds[-1] is None:
        bounds.pop()
    return Case(cid, "Clip", [x], {"min": lo, "max": hi}, ort("Clip", [x, *bounds]))


CASES += [clip_case("Clip_relu6", f32(1, 8, 11, 11, low=-3, high=9), 0.0, 6.0),
          clip_case("Clip_min_only", f32(3, 29), -0.5, None),
          clip_case("Clip_max_only", f32(3, 29), None, 0.25),
          clip_case("Clip_int64", _ints, -7, 12)]
CASES += [Case("LeakyRelu_default", "LeakyRelu", [_x := f32(2, 3, 19)], {"alpha": 0.01}, ort("LeakyRelu", [_x])),
          Case("LeakyRelu_alpha", "LeakyRelu", [_y := f32(4, 65)], {"alpha": 0.2}, ort("LeakyRelu", [_y], alpha=0.2))]


@pytest.fixture(scope="module")
def results():
    return run_cases(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_unary_matches_onnxruntime(case, results):
    expected = case.reference()
    for outputs in results[case.id]:
        assert_matches(case, outputs, expected)


def test_case_ids_are_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
