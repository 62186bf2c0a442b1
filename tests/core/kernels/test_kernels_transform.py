"""Data-movement kernels against ONNX Runtime (numpy for Slice's normalized form): reshape, transpose,
concat, slice, gather (negative indices, int32/int64), gather_elements, expand, pad (3 modes)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.kernel_runs import Case, assert_matches, onnx_reference, run_cases

rng = np.random.default_rng(3)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def i64(*shape, low=-100, high=100):
    return rng.integers(low, high, shape).astype(np.int64)


def tag(x):
    return f"{'x'.join(map(str, x.shape))}_{x.dtype}"


def reshape(x, shape):
    s = np.array(shape, np.int64)
    return Case(f"Reshape_{tag(x)}_to_{'x'.join(map(str, shape))}", "Reshape", [x], {"shape": tuple(shape)},
                lambda: onnx_reference("Reshape", [x, s]))


def transpose(x, perm):
    return Case(f"Transpose_{tag(x)}_{''.join(map(str, perm))}", "Transpose", [x], {"perm": tuple(perm)},
                lambda: onnx_reference("Transpose", [x], {"perm": list(perm)}))


def concat(parts, axis):
    return Case(f"Concat_{'_'.join(tag(p) for p in parts)}_ax{axis}", "Concat", list(parts), {"axis": axis},
                lambda: onnx_reference("Concat", list(parts), {"axis": axis}))


def slice_(x, starts, steps, sizes):
    def ref():
        index = tuple(slice(s, (s + n * st) if s + n * st >= 0 else None, st) for s, st, n in zip(starts, steps, sizes))
        return [x[index]]

    return Case(f"Slice_{tag(x)}_{starts}_{steps}_{sizes}", "Slice", [x],
                {"starts": tuple(starts), "steps": tuple(steps), "sizes": tuple(sizes)}, ref)


def gather(data, indices, axis):
    return Case(f"Gather_{tag(data)}_{tag(indices)}_ax{axis}", "Gather", [data, indices], {"axis": axis},
                lambda: onnx_reference("Gather", [data, indices], {"axis": axis}))


def gather_elements(data, indices, axis):
    return Case(f"GatherElements_{tag(data)}_{tag(indices)}_ax{axis}", "GatherElements", [data, indices],
                {"axis": axis}, lambda: onnx_reference("GatherElements", [data, indices], {"axis": axis}))


def expand(x, shape):
    s = np.array(shape, np.int64)
    return Case(f"Expand_{tag(x)}_to_{'x'.join(map(str, shape))}", "Expand", [x], {"shape": tuple(shape)},
                lambda: onnx_reference("Expand", [x, s]))


def pad(x, pads, mode="constant", value=0.0):
    p = np.array(pads, np.int64)
    extra = [p, np.array(value, x.dtype)] if mode == "constant" else [p]
    return Case(f"Pad_{tag(x)}_{mode}_{'_'.join(map(str, pads))}", "Pad", [x],
                {"pads": tuple(pads), "mode": mode, "value": value},
                lambda: onnx_reference("Pad", [x, *extra], {"mode": mode}))


def indices(shape, dim, dtype="int64"):
    """Indices in [-dim, dim): negative ones count from the end."""
    return rng.integers(-dim, dim, shape).astype(dtype)


_bert_mask = rng.integers(0, 2, (1, 64)).astype(np.int64)
CASES = [
    reshape(f32(1, 64, 128), (1, 64, 2, 64)), reshape(f32(2, 3, 4), (4, 6)), reshape(f32(6, 35), (2, 3, 5, 7)),
    reshape(i64(1, 64), (1, 1, 1, 64)), reshape(f32(1, 512, 1, 1), (1, 512)),
    transpose(f32(1, 64, 2, 64), (0, 2, 1, 3)), transpose(f32(1, 2, 64, 64), (0, 1, 3, 2)),
    transpose(f32(2, 3, 5), (2, 0, 1)), transpose(f32(9, 13), (1, 0)), transpose(i64(2, 3, 4, 5), (3, 1, 0, 2)),
    concat([f32(1, 64, 13, 13), f32(1, 64, 13, 13)], 1), concat([f32(2, 3), f32(5, 3), f32(1, 3)], 0),
    concat([f32(2, 3, 4), f32(2, 3, 1), f32(2, 3, 7)], 2), concat([i64(1, 2), i64(1, 3)], 1),
    concat([rng.random((2, 4)) < 0.5, rng.random((2, 4)) < 0.5], 0),
    slice_(f32(4, 10), (1, 0), (1, 2), (3, 5)), slice_(f32(3, 8, 6), (0, 7, 1), (1, -1, 2), (3, 8, 3)),
    slice_(f32(1, 512, 128), (0, 0, 0), (1, 1, 1), (1, 64, 128)), slice_(i64(10,), (9,), (-3,), (4,)),
    gather(f32(1000, 128), i64(1, 64, low=0, high=1000), 0), gather(f32(7, 9), indices((3, 4), 7), 0),
    gather(f32(5, 11, 3), indices((6,), 11, "int32"), 1), gather(f32(2, 3, 16), np.array(-1, np.int64), 2),
    gather(i64(8,), np.array([0, -1, 3, -8], np.int64), 0), gather(f32(2, 512), np.array(0, np.int64), 0),
    gather_elements(f32(4, 6), indices((4, 6), 4), 0), gather_elements(f32(3, 5, 2), indices((3, 7, 2), 5), 1),
    gather_elements(i64(2, 9), indices((2, 3), 9, "int32"), 1),
    expand(f32(1, 1, 1, 64), (1, 2, 64, 64)), expand(f32(3, 1), (2, 3, 5)), expand(_bert_mask, (1, 1, 64, 64)),
    expand(np.array([True, False]), (3, 2)),
    pad(f32(1, 3, 5, 6), (0, 0, 1, 2, 0, 0, 2, 1)), pad(f32(2, 7), (1, 3, 2, 0), value=-2.5),
    pad(f32(1, 3, 5, 6), (0, 0, 2, 1, 0, 0, 1, 3), "reflect"), pad(f32(4, 5), (3, 4, 2, 1), "edge"),
    pad(i64(3, 4), (1, 0, 0, 2), value=7), pad(f32(5, 8), (0, -2, -1, 1)),
]


@pytest.fixture(scope="module")
def results():
    return run_cases(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_transform_matches_onnxruntime(case, results):
    expected = case.reference()
    for outputs in results[case.id]:
        assert_matches(case, outputs, expected)


def test_case_ids_are_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
