"""The quantize job's options (no ONNX Runtime import here: the CLI's parser and the API's schema read them)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .errors import QuantizeOptionsError

METHOD_NAMES = ("minmax", "percentile", "entropy")  # calibration methods (ORT's MinMax, Percentile, Entropy)


@dataclass(frozen=True)
class QuantizeOptions:
    per_channel: bool = False
    method: str = "minmax"
    keep_float: tuple[str, ...] = ()  # node names left in float32 by the user
    max_error: Optional[float] = None  # budget on the largest relative error of any output (None: no fallback)
    sensitivity_layers: int = 16  # cap on the layers measured one by one (0: no sensitivity, no fallback)
    threads: int = 0  # ORT threads for calibration and evaluation (0: ORT's default)
    op_types: tuple[str, ...] = ()  # the op types to quantize (empty: every op ORT's QDQ quantizer knows)

    def __post_init__(self):
        if self.method not in METHOD_NAMES:
            raise QuantizeOptionsError(f"unknown calibration method {self.method!r}; use one of {', '.join(METHOD_NAMES)}")
        if self.max_error is not None and not self.max_error > 0:
            raise QuantizeOptionsError(f"the error budget must be a positive number, not {self.max_error}")
        if self.sensitivity_layers < 0:
            raise QuantizeOptionsError("the number of layers to measure the sensitivity of cannot be negative")
