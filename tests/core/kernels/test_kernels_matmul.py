"""MatMul kernels against ONNX Runtime: 2-D, batched with broadcasting, 1-D operands, ragged tiles."""
from __future__ import annotations

import numpy as np
import pytest

from core.kernels.schedules.matmul import GEMV_SEGMENT, gemv_columns
from tests.helpers.kernel_runs import Case, assert_matches, onnx_reference, run_cases

rng = np.random.default_rng(5)


def matmul(a_shape, b_shape, dtype="float32", both=False):
    if dtype == "float32":
        a, b = rng.standard_normal(a_shape).astype(dtype), rng.standard_normal(b_shape).astype(dtype)
    else:
        a, b = rng.integers(-9, 9, a_shape).astype(dtype), rng.integers(-9, 9, b_shape).astype(dtype)
    k = a_shape[-1]
    cid = f"MatMul_{'x'.join(map(str, a_shape))}_{'x'.join(map(str, b_shape))}_{dtype}"
    return Case(cid, "MatMul", [a, b], {}, lambda: onnx_reference("MatMul", [a, b]), rtol=1e-4,
                atol=2e-5 * np.sqrt(k), unscheduled_too=both)


CASES = [
    matmul((5, 7), (7, 9), both=True),
    matmul((64, 128), (128, 512)),  # bert's feed-forward
    matmul((1, 64, 128), (128, 128)),  # activations times a weight
    matmul((1, 2, 64, 64), (1, 2, 64, 64), both=True),  # attention scores
    matmul((2, 1, 4, 5), (3, 5, 6)),  # batch broadcasting both ways
    matmul((4, 5), (2, 5, 3)),
    matmul((7,), (7, 3)),  # 1-D operands are promoted, then squeezed
    matmul((2, 3, 7), (7,)),
    matmul((13,), (13,)),
    matmul((1, 512), (512, 1000)),  # a classifier: one row, K split into tiles
    matmul((1, 300), (300, 1004)),  # one row in long segments of B's rows, each ending in a partial vector
    matmul((3, 1, 64), (3, 64, 72)),  # one row per batch (a decoder step's attention)
    matmul((37, 300), (300, 29), both=True),  # ragged row and column tiles, K tiled with a remainder
    matmul((6, 11), (11, 8), dtype="int64"),
    matmul((3, 4, 5), (5, 6), dtype="int32"),
]


@pytest.fixture(scope="module")
def results():
    return run_cases(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_matmul_matches_onnxruntime(case, results):
    expected = case.reference()
    for outputs in results[case.id]:
        assert_matches(case, outputs, expected)


@pytest.mark.parametrize("lanes", [8, 16])
def test_gemv_streams_long_row_segments_one_per_core(lanes):
    assert gemv_columns(1000, lanes) == 1000  # one pass over each row of B
    assert gemv_columns(1000, lanes, chunks=2) == 500  # one segment per core
    assert gemv_columns(1000, lanes, chunks=64) == 250  # ... while segments stay long
    assert gemv_columns(3 * GEMV_SEGMENT, lanes) == GEMV_SEGMENT  # accumulators stay in L1
    assert gemv_columns(37, lanes) == (37 if lanes == 8 else 16)  # 4 vectors or more; else the plain tile
    assert gemv_columns(6, lanes) == 6  # narrower than a vector: the plain column tile
