"""MatMul's packed right operand in numpy: zero-padded panels, their inverse, and when packing pays."""
from __future__ import annotations

import numpy as np

from core.packing.panels import PANEL, pack_weights, unpack_weights, worth_packing

rng = np.random.default_rng(11)


def test_pack_weights_pads_with_zeros():
    b = rng.standard_normal((5, 20)).astype(np.float32)
    packed = pack_weights(b)
    assert packed.shape == (2, 5, PANEL)
    np.testing.assert_array_equal(packed[1, :, :4], b[:, 16:])
    assert not packed[1, :, 4:].any()


def test_unpack_weights_inverts_batched_packing():
    b = rng.standard_normal((3, 7, 40)).astype(np.float32)
    packed = pack_weights(b)
    assert packed.shape == (3, 3, 7, PANEL)
    np.testing.assert_array_equal(unpack_weights(packed, 40), b)


def test_only_float32_products_of_some_size_are_worth_packing():
    assert worth_packing(8, 40, 64, "float32")
    assert not worth_packing(1, 1024, 1024, "float32")  # a GEMV: packing at run time costs a pass over B
    assert worth_packing(1, 1024, 1024, "float32", constant=True)  # ... at compile time, nothing
    assert not worth_packing(1, 16, 16, "float32", constant=True)  # tiny
    assert not worth_packing(8, 40, 64, "float16") and not worth_packing(4, 8, 8, "float32")  # dtype; tiny
