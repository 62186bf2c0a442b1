"""Reductions over the contiguous last axis split into vector lanes (core/kernels/reduce_lanes.py):
rows that fill the lanes exactly and ragged ones (a tail of n % LANES), keepdims on and off, several trailing
axes as one, and the ops built on them (Softmax, LogSoftmax, LayerNormalization, ArgMax), against ONNX Runtime."""
from __future__ import annotations

import numpy as np
import pytest

from core.kernels.reduce_lanes import LANES, MIN_EXTENT, lane_split_applies
from tests.helpers.kernel_runs import Case, assert_matches, onnx_reference, run_cases
from core.te import tensor as te

rng = np.random.default_rng(5)


def f32(*shape, scale=1.0, shift=0.0):
    return (rng.standard_normal(shape) * scale + shift).astype(np.float32)


def reduce(op, x, keepdims):
    attrs = {"axes": (x.ndim - 1,), "keepdims": keepdims}
    if op == "ReduceSum":
        ref = lambda: onnx_reference(op, [x, np.array([x.ndim - 1], np.int64)], {"keepdims": keepdims})  # noqa: E731
    else:
        ref = lambda: onnx_reference(op, [x], {"axes": [x.ndim - 1], "keepdims": keepdims})  # noqa: E731
    return Case(f"{op}_{'x'.join(map(str, x.shape))}_k{keepdims}", op, [x], attrs, ref, rtol=1e-5,
                atol=1e-5 * np.sqrt(x.shape[-1]))


# 64 and 256: whole lanes; 100, 197, 1500: a tail of 4, 5 and 28 elements
CASES: list[Case] = []
for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"):
    CASES += [reduce(op, f32(3, 64), 1), reduce(op, f32(2, 5, 100), 0), reduce(op, f32(7, 197, shift=3.0), 1),
              reduce(op, f32(2, 1500), 0)]
for op in ("Softmax", "LogSoftmax"):
    for x in (f32(1, 3, 5, 197, scale=4.0), f32(2, 256), f32(4, 1500, scale=8.0)):
        CASES.append(Case(f"{op}_{'x'.join(map(str, x.shape))}", op, [x], {"axis": -1},
                          lambda x=x, op=op: onnx_reference(op, [x], {"axis": -1}), rtol=1e-5, atol=1e-6))
for x in (f32(5, 192, scale=2.0, shift=1.0), f32(3, 197)):
    inputs, attrs = [x, f32(x.shape[-1]), f32(x.shape[-1])], {"axis": -1, "epsilon": 1e-5}
    CASES.append(Case(f"LayerNorm_{'x'.join(map(str, x.shape))}", "LayerNormalization", inputs, attrs,
                      lambda inputs=inputs, attrs=attrs: onnx_reference("LayerNormalization", inputs, attrs),
                      rtol=1e-4, atol=2e-5))
# Several trailing axes without kept dims (DynamicQuantizeLinear's range of a whole tensor): one flattened axis.
for op, x, axes in (("ReduceMin", f32(1, 64, 512, shift=2.0), (0, 1, 2)), ("ReduceMax", f32(3, 5, 7, 11), (1, 2, 3)),
                    ("ReduceSum", f32(2, 64, 3), (1, 2))):
    reference = (lambda x=x, axes=axes: onnx_reference("ReduceSum", [x, np.array(axes, np.int64)], {"keepdims": 0})) \
        if op == "ReduceSum" else (lambda op=op, x=x, axes=axes: onnx_reference(op, [x], {"axes": list(axes),
                                                                                          "keepdims": 0}))
    CASES.append(Case(f"{op}_{'x'.join(map(str, x.shape))}_trailing", op, [x], {"axes": axes, "keepdims": 0}, reference,
                      rtol=1e-5, atol=1e-4))
_arg_x = f32(6, 131)
CASES.append(Case("ArgMax_6x131", "ArgMax", [_arg_x], {"axis": 1, "keepdims": 1},
                  lambda: onnx_reference("ArgMax", [_arg_x], {"axis": 1, "keepdims": 1})))


@pytest.fixture(scope="module")
def results():
    return run_cases(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_lane_split_reduction_matches_onnxruntime(case, results):
    expected = case.reference()
    for outputs in results[case.id]:
        assert_matches(case, outputs, expected)


def test_only_long_float32_rows_over_the_last_axis_are_split():
    row = te.placeholder((4, MIN_EXTENT), "float32", "x")
    assert lane_split_applies(row, [1], "sum") and lane_split_applies(row, [1], "max")
    assert not lane_split_applies(row, [0], "sum")  # not the contiguous axis
    assert not lane_split_applies(row, [0, 1], "sum")
    assert not lane_split_applies(row, [1], "prod")
    assert not lane_split_applies(te.placeholder((4, MIN_EXTENT - 1), "float32", "s"), [1], "sum")
    assert not lane_split_applies(te.placeholder((4, 4 * LANES), "int64", "i"), [1], "sum")


def test_trailing_axes_reduce_as_one_flattened_axis():
    from core.kernels.reduce_lanes import trailing_axes_flat

    x = te.placeholder((2, 8, 16), "float32", "x")
    assert trailing_axes_flat(x, [0, 1, 2], False, "min") and trailing_axes_flat(x, [1, 2], False, "sum")
    assert not trailing_axes_flat(x, [0, 1], False, "min")  # not trailing
    assert not trailing_axes_flat(x, [1, 2], True, "min")  # kept dims keep the plain reduction
    assert not trailing_axes_flat(te.placeholder((2, 3, 4), "float32", "y"), [1, 2], False, "max")  # too short
