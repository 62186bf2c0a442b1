"""Post-training int8 quantization (QDQ via ONNX Runtime) with its accuracy cost, layer sensitivity and fallback."""
from __future__ import annotations

from importlib import import_module

from .errors import AlreadyQuantizedError, CalibrationError, QuantizeOptionsError
from .options import METHOD_NAMES, QuantizeOptions

# The rest imports ONNX Runtime's quantization tools (most of a second): loaded on first use, not by `kiln --help`.
_LAZY = {"check_calibration": "calibration", "load_calibration": "calibration", "model_inputs": "calibration",
         "QuantizeResult": "quantizer", "is_quantized_op": "quantizer", "node_names": "quantizer",
         "quantize_model": "quantizer", "quantized_ops": "quantizer"}

__all__ = ["AlreadyQuantizedError", "CalibrationError", "METHOD_NAMES", "QuantizeOptions", "QuantizeOptionsError",
           *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
