"""8-bit weight blocks for the dot-product intrinsics: layout, padding, zero-point shift and correction."""
from __future__ import annotations

import numpy as np

from core.packing.int8 import column_correction, pack_dot_weights, shifted_weights, unpack_dot_weights


def test_blocks_are_lane_major_groups_of_four_and_round_trip():
    b = np.random.default_rng(0).integers(-128, 128, (10, 21)).astype(np.int8)
    packed = pack_dot_weights(b, 16)
    assert packed.shape == (2, 3, 16, 4) and packed.dtype == np.int8
    assert packed[1, 2, 3, 1] == b[2 * 4 + 1, 16 + 3]  # block of columns 16-31, k 8-11, lane 3, k 9
    assert not packed[1, :, 5:].any() and not packed[:, 2, :, 2:].any()  # zero padding past N and K
    np.testing.assert_array_equal(unpack_dot_weights(packed, 10, 21), b)


def test_shifted_weights_fit_int8_or_are_refused():
    u8 = np.array([[0, 255], [128, 1]], np.uint8)
    np.testing.assert_array_equal(shifted_weights(u8, np.array(128, np.uint8)), [[-128, 127], [0, -127]])
    assert shifted_weights(np.array([[-128, 0]], np.int8), np.array([1, 0], np.int8)) is None  # -129
    np.testing.assert_array_equal(shifted_weights(np.array([[5, 5]], np.int8), np.array([1, 2], np.int8)), [[4, 3]])


def test_column_correction_is_the_zero_points_share():
    a = np.array([[200, 7, 255]], np.int64)
    b = np.array([[1, -128], [2, 127], [-3, 5]], np.int8)
    raw = a @ b.astype(np.int64)
    np.testing.assert_array_equal(raw + column_correction(b, 200), (a - 200) @ b.astype(np.int64))
