"""One clear error each: calibration data that is not the model's inputs, empty or too small; a model that is
already quantized; --keep-float naming no node; options out of range."""
from __future__ import annotations

import numpy as np
import pytest

from core.quantize import (AlreadyQuantizedError, CalibrationError, QuantizeOptions, QuantizeOptionsError,
                           quantize_model)

from .models import INPUT, calibration_samples, write_calibration, write_model


@pytest.fixture
def model(tmp_path):
    return write_model(tmp_path)


@pytest.mark.parametrize("arrays, needle", [
    ({}, "is empty: it holds no samples"),
    ({INPUT: np.zeros((0, 1, 3, 12, 12), np.float32)}, "is empty: it holds no samples"),
    ({"pixels": calibration_samples(4)}, "missing input(s) 'image'; unknown name(s) 'pixels'"),
    ({INPUT: calibration_samples(4).astype(np.float64)}, "input 'image' is float64, the model takes float32"),
    ({INPUT: np.zeros((4, 1, 3, 8, 8), np.float32)}, "has shape [4, 1, 3, 8, 8], the model takes [1, 3, 12, 12]"),
    ({INPUT: calibration_samples(1)}, "holds 1 sample; at least 2 are needed"),
])
def test_calibration_that_does_not_fit_the_model_is_one_error(model, tmp_path, arrays, needle):
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    with pytest.raises(CalibrationError) as err:
        quantize_model(model, path)
    assert needle in str(err.value) and "bad.npz" in str(err.value) and err.value.code == "bad_calibration"


def test_not_an_npz_is_one_error(model, tmp_path):
    path = tmp_path / "calibration.npz"
    path.write_bytes(b"not a zip file")
    with pytest.raises(CalibrationError, match="not a readable .npz"):
        quantize_model(model, path)


def test_an_already_quantized_model_is_refused(model, tmp_path):
    qdq = tmp_path / "qdq.onnx"
    qdq.write_bytes(quantize_model(model, write_calibration(tmp_path), QuantizeOptions(sensitivity_layers=0)).model)
    with pytest.raises(AlreadyQuantizedError, match="already quantized .*DequantizeLinear, QuantizeLinear") as err:
        quantize_model(qdq, write_calibration(tmp_path))
    assert err.value.code == "already_quantized"


def test_keep_float_naming_no_node_is_refused_with_the_layers_it_has(model, tmp_path):
    with pytest.raises(QuantizeOptionsError, match=r"names no node of the model: 'conv9' \(its Conv/MatMul/Gemm "
                                                   r"layers: conv1, conv2, fc\)"):
        quantize_model(model, write_calibration(tmp_path), QuantizeOptions(keep_float=("conv1", "conv9")))


@pytest.mark.parametrize("options, needle", [
    (dict(method="kl"), "unknown calibration method 'kl'"),
    (dict(max_error=0.0), "must be a positive number"),
    (dict(sensitivity_layers=-1), "cannot be negative"),
])
def test_options_out_of_range_are_refused(options, needle):
    with pytest.raises(QuantizeOptionsError, match=needle):
        QuantizeOptions(**options)
