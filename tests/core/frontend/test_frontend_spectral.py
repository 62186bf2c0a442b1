"""DFT (forward, inverse, one-sided, irfft, dft_length crop/pad, axes) compiled vs ONNX Runtime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from core.frontend.converters.spectral import transform_matrix
from tests.core.kernels.spatial_cases import assert_kiln_matches_ort

rng = np.random.default_rng(17)


@pytest.mark.parametrize("shape,axis,attrs,length", [
    ((2, 8, 3, 1), 1, {}, None),
    ((2, 8, 3, 2), 2, {"inverse": 1}, None),
    ((1, 9, 4, 1), 1, {"onesided": 1}, 12),  # zero-padded to 12
    ((3, 6, 2), 1, {"inverse": 1, "onesided": 1}, 10),  # irfft of 6 bins to 10 samples
    ((2, 5, 7, 2), -2, {}, 4),  # cropped to 4
])
def test_dft_matches_ort(shape, axis, attrs, length):
    x = rng.standard_normal(shape).astype(np.float32)
    names = ["x", "length" if length else "", "axis"]
    constants = {"axis": np.array(axis, np.int64)}
    if length:
        constants["length"] = np.array(length, np.int64)
    node = helper.make_node("DFT", names, ["y"], **attrs)
    assert_kiln_matches_ort(node, {"x": x}, constants, opset=20, atol=1e-4)


def test_transform_matrix_is_numpys_fft():
    x = rng.standard_normal((5, 7)) + 1j * rng.standard_normal((5, 7))
    flat = np.stack([x.real, x.imag], axis=-1).reshape(5, 14)
    got = (flat @ transform_matrix(7, 2, 7, False, False)).reshape(5, 7, 2)
    np.testing.assert_allclose(got[..., 0] + 1j * got[..., 1], np.fft.fft(x, axis=1), atol=1e-12)


@pytest.mark.parametrize("onesided", [0, 1])
def test_stft_with_window_matches_ort(onesided):
    signal = rng.standard_normal((2, 40, 1)).astype(np.float32)
    window = np.hanning(12).astype(np.float32)
    node = helper.make_node("STFT", ["signal", "step", "window", "length"], ["y"], onesided=onesided)
    constants = {"step": np.array(5, np.int64), "length": np.array(12, np.int64)}
    assert_kiln_matches_ort(node, {"signal": signal, "window": window}, constants, opset=17, atol=1e-4)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
def test_window_functions_match_ort(op, periodic):
    node = helper.make_node(op, ["size"], ["y"], periodic=periodic)
    assert_kiln_matches_ort(node, {}, {"size": np.array(10, np.int64)}, opset=17, atol=1e-6)
