"""The quantize job's user errors, each with its code (the CLI exits 2 on them, the API answers 422)."""
from __future__ import annotations

from ..errors import KilnError


class CalibrationError(KilnError):
    """The calibration .npz cannot be used: unreadable, empty, too few samples, or not the model's inputs."""

    code = "bad_calibration"


class AlreadyQuantizedError(KilnError):
    """The model already holds quantized ops (QDQ or QOperator): quantizing it again is refused."""

    code = "already_quantized"


class QuantizeOptionsError(KilnError):
    """An option names something the model lacks (--keep-float LAYER), or is out of range."""

    code = "bad_quantize_options"
