"""The blocked layout NCHW[x]c in numpy: block choice, blocking and conv weight packing round trips."""
from __future__ import annotations

import numpy as np

from core.graph.testing import rng
from core.packing.blocked import (block_for, from_blocked, pack_channel_vector, pack_weights, relayout, to_blocked,
                                  unpack_weights)


def test_block_choice_and_weight_packing_round_trip():
    assert [block_for(c, 8) for c in (64, 12, 3, 1000, 7)] == [8, 6, 3, 8, 7]
    x = rng(0).standard_normal((2, 16, 3, 5)).astype(np.float32)
    assert to_blocked(x, 8).shape == (2, 2, 3, 5, 8)
    np.testing.assert_array_equal(from_blocked(to_blocked(x, 8)), x)
    w = rng(1).standard_normal((16, 8, 3, 3)).astype(np.float32)
    packed = pack_weights(w, 4, 8, False)
    assert packed.shape == (2, 2, 3, 3, 4, 8) and packed[1, 0, 2, 1, 3, 5] == w[13, 3, 2, 1]
    np.testing.assert_array_equal(unpack_weights(packed, False), w)
    dw = rng(2).standard_normal((16, 1, 3, 3)).astype(np.float32)
    np.testing.assert_array_equal(unpack_weights(pack_weights(dw, 8, 8, True), True), dw)


def test_relayout_between_blocks_and_the_blocked_bias():
    x = rng(3).standard_normal((1, 16, 2, 3)).astype(np.float32)
    np.testing.assert_array_equal(relayout(relayout(x, 0, 8), 8, 4), to_blocked(x, 4))
    np.testing.assert_array_equal(relayout(to_blocked(x, 4), 4, 0), x)
    np.testing.assert_array_equal(pack_channel_vector(np.arange(16), 8)[1], np.arange(8, 16))
