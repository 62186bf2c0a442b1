"""Reductions, Softmax/LogSoftmax and LayerNormalization against ONNX Runtime (opset 17)."""
from __future__ import annotations

import numpy as np
import pytest

from core.graph.ir import TensorType
from tests.helpers.kernel_runs import Case, assert_matches, onnx_reference, run_cases

rng = np.random.default_rng(21)


def f32(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def reduce(op, x, axes, keepdims, both=False):
    attrs = {"axes": tuple(axes), "keepdims": keepdims}
    if op == "ReduceSum":  # opset 13+: axes is an input
        ref = lambda: onnx_reference(op, [x, np.array(axes, np.int64)], {"keepdims": keepdims})  # noqa: E731
    else:
        ref = lambda: onnx_reference(op, [x], {"axes": list(axes), "keepdims": keepdims})  # noqa: E731
    cid = f"{op}_{'x'.join(map(str, x.shape))}_{x.dtype}_ax{''.join(map(str, axes))}_k{keepdims}"
    return Case(cid, op, [x], attrs, ref, rtol=1e-5, atol=1e-5 * np.sqrt(x.size), unscheduled_too=both)


CASES: list[Case] = []
for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"):
    CASES += [reduce(op, f32(2, 5, 7), (1,), 1, both=True), reduce(op, f32(2, 5, 7), (2,), 0),
              reduce(op, f32(2, 5, 7), (0, 2), 1), reduce(op, f32(1, 64, 9, 9), (2, 3), 1),
              reduce(op, f32(3, 4, 5), (0, 1, 2), 0), reduce(op, f32(8, 40, 64), (1,), 0)]
CASES += [reduce("ReduceProd", (rng.uniform(0.5, 1.5, (3, 6, 5))).astype(np.float32), (1,), 1),
          reduce("ReduceSum", rng.integers(-9, 9, (4, 6, 3)).astype(np.int64), (1,), 0),
          reduce("ReduceMax", rng.integers(-9, 9, (4, 6, 3)).astype(np.int64), (0, 2), 1),
          reduce("ReduceMean", rng.integers(-9, 9, (4, 6)).astype(np.int64), (1,), 1)]


def softmax(op, x, axis, both=False):
    return Case(f"{op}_{'x'.join(map(str, x.shape))}_ax{axis}", op, [x], {"axis": axis},
                lambda: onnx_reference(op, [x], {"axis": axis}), rtol=1e-5, atol=1e-6, unscheduled_too=both)


for op in ("Softmax", "LogSoftmax"):
    CASES += [softmax(op, f32(1, 2, 64, 64, scale=4.0), -1, both=True), softmax(op, f32(3, 17), 1),
              softmax(op, f32(4, 9, 6), 1), softmax(op, f32(5, 7), 0), softmax(op, f32(2, 3, 8, scale=40.0), 2)]
    # float16 rows of 1000: exp and its sum are accumulated in float32, or the sum drifts by several ulps.
    x16 = f32(4, 1000, scale=0.5).astype(np.float16)
    wide_reference = lambda x16=x16, op=op: [  # noqa: E731
        r.astype(np.float16) for r in onnx_reference(op, [x16.astype(np.float32)], {"axis": 1})]
    CASES.append(Case(f"{op}_4x1000_float16", op, [x16], {"axis": 1}, wide_reference, rtol=1e-3, atol=2e-6))


def layer_norm(x, axis, bias=True, eps=1e-5, outputs=1, both=False):
    shape = x.shape[axis:]
    inputs = [x, f32(*shape), f32(*shape) if bias else None]
    cid = f"LayerNorm_{'x'.join(map(str, x.shape))}_ax{axis}_b{int(bias)}_o{outputs}"
    attrs = {"axis": axis, "epsilon": eps}
    stats = TensorType(x.shape[:axis] + (1,) * (x.ndim - axis), "float32")
    return Case(cid, "LayerNormalization", inputs, attrs,
                lambda: onnx_reference("LayerNormalization", inputs, attrs, num_outputs=outputs), rtol=1e-4,
                atol=2e-5, unscheduled_too=both, out_types=[TensorType(x.shape, x.dtype.name)] + [stats] * (outputs - 1))


CASES += [layer_norm(f32(1, 64, 128, scale=3.0), -1, eps=1e-12, both=True), layer_norm(f32(2, 5, 33), 2, bias=False),
          layer_norm(f32(2, 3, 4, 5), 1), layer_norm(f32(4, 16) + 100, -1),
          layer_norm(f32(3, 10), 1, outputs=3)]


@pytest.fixture(scope="module")
def results():
    return run_cases(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_reduction_matches_onnxruntime(case, results):
    expected = case.reference()
    for outputs in results[case.id]:
        assert_matches(case, outputs, expected)


def test_case_ids_are_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
