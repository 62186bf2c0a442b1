"""SoftmaxAttention's loop program (core/kernels/attention.py) against a float64 numpy reference: row blocks of
4, 3, 2 and 1 query rows (the last block overlapping the one before when it does not divide the rows), key counts
that are and are not whole vector chunks, broadcast and full biases, the causal mask from positions (whole key
chunks skipped), and a fully masked row with and without the NaN guard."""
from __future__ import annotations

import numpy as np
import pytest

from core.graph.op_defs.attention import attention_reference, causal_bias
from core.kernels.attention import row_block
from tests.helpers.kernel_runs import Case, assert_matches, run_cases

rng = np.random.default_rng(23)


def f32(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def case(name, batch, m, d, n, e, bias=None, **attrs):
    q, kt, v = f32(*batch, m, d), f32(*batch, d, n), f32(*batch, n, e)
    inputs = [q, kt, v] + ([bias] if bias is not None else [])
    return Case(name, "SoftmaxAttention", inputs, attrs,
                lambda: [attention_reference(q, kt, v, bias, attrs)], rtol=1e-5, atol=2e-6)


masked_row = np.zeros((5, 9), np.float32)
masked_row[2] = -np.inf  # query 2 sees no key
CASES = [
    case("block4_whole_chunks", (1, 2), 8, 16, 32, 16, scale=0.25),
    case("ragged_rows_and_keys", (2, 3), 9, 8, 37, 8, scale=0.5),
    case("last_block_overlaps", (1, 2), 7, 8, 20, 24),  # blocks of 4 rows: rows 3..6 last
    case("one_query", (2, 2), 1, 8, 20, 16),
    case("block3_causal_chunks", (1, 2), 3, 8, 70, 16, causal=1),  # 3 rows: 32-key score chunks, 16-key passes
    case("wide_values_block2", (1, 1), 6, 8, 19, 48),
    case("bias_per_head", (2, 3), 4, 8, 21, 8, bias=f32(3, 1, 21, scale=2.0), scale=0.3),
    case("bias_full", (2, 2), 6, 4, 17, 8, bias=f32(2, 2, 6, 17)),
    case("causal_square", (1, 2), 12, 8, 12, 8, causal=1, scale=0.35),
    case("causal_queries_last", (1, 2), 5, 8, 21, 8, causal=1),
    case("causal_skips_chunks", (2, 1), 40, 8, 40, 16, causal=1, scale=0.2),  # whole key chunks left out
    case("causal_ragged_rows_bias", (1, 2), 9, 8, 37, 8, causal=1, bias=f32(1, 9, 37)),
    case("masked_row_guarded", (1, 1), 5, 4, 9, 4, bias=masked_row, nan_to_zero=1),
    case("masked_row_nan", (1, 1), 5, 4, 9, 4, bias=masked_row),
]


@pytest.fixture(scope="module")
def results():
    return run_cases(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_matches_reference(case, results):
    (outputs,) = results[case.id]
    assert_matches(case, outputs, case.reference())


def test_masked_row_is_zero_with_the_guard_and_nan_without(results):
    guarded, = results["masked_row_guarded"][0]
    unguarded, = results["masked_row_nan"][0]
    assert np.all(guarded[0, 0, 2] == 0) and np.all(np.isnan(unguarded[0, 0, 2]))
    assert np.isfinite(guarded).all() and np.isfinite(np.delete(unguarded, 2, axis=2)).all()


def test_row_blocks_and_causal_bias():
    assert [row_block(m, 16) for m in (8, 7, 3, 1)] == [4, 4, 3, 1]
    assert row_block(8, 64) == 2  # 4 vectors of outputs per row: two rows fill the accumulators
    assert row_block(8, 200) == 1
    assert causal_bias(2, 3).tolist() == [[0, 0, -np.inf], [0, 0, 0]]
