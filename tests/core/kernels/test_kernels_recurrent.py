"""LSTMSequence and GRUSequence (one loop program per layer direction) against their numpy references:
forward and reverse, batch rows with sequence lengths, unit blocks narrower than a vector."""
from __future__ import annotations

import numpy as np
import pytest

from core.graph.op_defs.recurrent import (GRU_GATES, LSTM_GATES, gru_reference, lstm_reference,
                                          pack_recurrent_weight, unit_block)
from tests.helpers.kernel_runs import OpKernel, build_kernels

rng = np.random.default_rng(5)

# (op, seq, batch, hidden, reverse, lengths): whole 16-unit blocks, 10-unit blocks (H = 20), one step of
# one 7-unit block
CASES = [("LSTMSequence", 6, 1, 32, False, None), ("LSTMSequence", 5, 3, 20, True, None),
         ("LSTMSequence", 4, 3, 16, False, [4, 2, 0]), ("LSTMSequence", 1, 2, 7, True, None),
         ("GRUSequence", 6, 1, 32, False, None), ("GRUSequence", 5, 2, 20, True, None),
         ("GRUSequence", 4, 3, 16, False, [1, 4, 0])]


def _inputs(op, seq, batch, hidden, lengths):
    gates = LSTM_GATES if op == "LSTMSequence" else GRU_GATES
    f32 = lambda *shape: (rng.standard_normal(shape) * 0.5).astype(np.float32)  # noqa: E731
    packed = pack_recurrent_weight(f32(gates * hidden, hidden), gates, unit_block(hidden))
    states = [f32(batch, hidden), f32(batch, hidden)] if op == "LSTMSequence" else [f32(hidden), f32(batch, hidden)]
    extra = [] if lengths is None else [np.asarray(lengths, np.int32)]
    return [f32(seq, batch, gates * hidden), packed, *states, *extra]


@pytest.fixture(scope="module")
def runs():
    kernels, expected = [], []
    for n, (op, seq, batch, hidden, reverse, lengths) in enumerate(CASES):
        inputs = _inputs(op, seq, batch, hidden, lengths)
        attrs = {"reverse": int(reverse)}
        kernels.append(OpKernel(f"rnn{n}", op, inputs, attrs))
        reference = lstm_reference if op == "LSTMSequence" else gru_reference
        expected.append(reference(inputs, attrs)[0])
    return list(zip(CASES, build_kernels(kernels), expected))


def test_sequences_match_the_numpy_reference(runs):
    for case, run, want in runs:
        (got,) = run.run()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=str(case))


def test_the_packed_weight_reads_each_blocks_gates_contiguously():
    r = np.arange(3 * 4 * 4, dtype=np.float32).reshape(12, 4)  # 3 gates x H = 4 rows, H columns
    packed = pack_recurrent_weight(r, 3, 2)
    assert packed.shape == (2, 4, 3, 2)
    assert packed[1, 3, 2].tolist() == [r[2 * 4 + 2, 3], r[2 * 4 + 3, 3]]  # block 1, k 3, gate 2: units 2, 3
    assert unit_block(20) == 10 and unit_block(256) == 16 and unit_block(7) == 7
