"""The blocked layout NCHW[x]c in numpy: block choice, blocking and conv weight packing round trips."""
from __future__ import annotations

import numpy as np

from tests.helpers.graphs import rng
from core.packing.blocked import (block_for, expand_groups, from_blocked, pack_channel_vector, pack_weights, relayout,
                                  to_blocked, unpack_weights)


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


def test_expand_groups_places_each_group_block_diagonally():
    w = rng(4).standard_normal((8, 2, 3, 3)).astype(np.float32)  # 4 groups of 2 channels in and out
    wide = expand_groups(w, 4, 2)  # as 2 groups of 4
    assert wide.shape == (8, 4, 3, 3) and expand_groups(w, 4, 4) is w
    for c in range(8):
        start = (c % 4) // 2 * 2
        np.testing.assert_array_equal(wide[c, start:start + 2], w[c])
        assert not np.any(np.delete(wide[c], [start, start + 1], axis=0))
