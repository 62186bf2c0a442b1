"""Calibration samples: an .npz of the model's inputs (first axis = samples), split into calibration and held-back."""
from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Iterator, Mapping, Optional, Sequence

import numpy as np
import onnx
from onnxruntime.quantization import CalibrationDataReader

from ..files.npz import MAX_VALIDATION_INPUT_BYTES, load_validation_inputs
from ..errors import ValidationInputError
from .errors import CalibrationError

HOLD_BACK_SHARE = 0.2  # of the samples, at least one, kept out of calibration to measure the accuracy cost
_ONNX_TO_NUMPY = onnx.helper.tensor_dtype_to_np_dtype


def model_inputs(model: onnx.ModelProto) -> dict[str, tuple[tuple, str]]:
    """The graph's real inputs (initializers excluded) as {name: (shape, dtype)}; a symbolic dimension is its name."""
    initializers = {t.name for t in model.graph.initializer}
    inputs = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor.shape.dim)
        inputs[value.name] = (shape, str(np.dtype(_ONNX_TO_NUMPY(tensor.elem_type))))
    return inputs


def _is_empty(path: Path) -> bool:
    """No arrays, or an array with no samples; read from the .npy headers only (nothing is inflated here)."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = [m for m in archive.infolist() if m.filename.endswith(".npy")]
            if not members:
                return not archive.infolist()
            for member in members:
                with archive.open(member) as f:
                    fmt = np.lib.format
                    version = fmt.read_magic(f)
                    shape = (fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0)(f)[0]
                if shape and shape[0] == 0:
                    return True
            return False
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return False  # load_validation_inputs says what is wrong with it


def load_calibration(path: "str | Path", model: onnx.ModelProto,
                     max_bytes: int = MAX_VALIDATION_INPUT_BYTES) -> list[dict[str, np.ndarray]]:
    """The samples of a calibration .npz (arrays named as the model's inputs, one more leading axis for several
    samples), checked against the model's input names, shapes and dtypes; at least two (one is held back)."""
    return check_calibration(path, model_inputs(model), max_bytes)


def check_calibration(path: "str | Path", inputs: Mapping[str, tuple[tuple, str]],
                      max_bytes: int = MAX_VALIDATION_INPUT_BYTES, label: Optional[str] = None) -> list[dict[str, np.ndarray]]:
    """load_calibration against `inputs` ({name: (shape, dtype)}, as an uploaded model's summary has them);
    `label` names the file in messages (default: its file name)."""
    path = Path(path)
    label = label or path.name
    if not path.is_file():
        raise CalibrationError(f"no such calibration file: {path}")
    if _is_empty(path):
        raise CalibrationError(f"calibration data {label} is empty: it holds no samples")
    try:
        samples = load_validation_inputs(path, inputs, max_bytes=max_bytes)
    except ValidationInputError as err:
        message = str(err).replace("validation inputs", "calibration data").replace(str(path), label)
        raise CalibrationError(f"calibration data {message}") from None
    if len(samples) < 2:
        raise CalibrationError(f"calibration data {label} holds {len(samples)} sample; at least 2 are needed "
                               f"(one or more to calibrate on, {HOLD_BACK_SHARE:.0%} held back to measure the error)")
    return samples


def split_samples(samples: Sequence[dict], share: float = HOLD_BACK_SHARE,
                  seed: int = 0) -> tuple[list[dict], list[dict]]:
    """(calibration, held_back): a seeded shuffle, so that an .npz ordered by class still holds back a mix."""
    order = np.random.default_rng(seed).permutation(len(samples))
    held = max(1, int(round(len(samples) * share)))
    held = min(held, len(samples) - 1)
    return [samples[i] for i in order[held:]], [samples[i] for i in order[:held]]


class SampleReader(CalibrationDataReader):
    """ONNX Runtime's calibration reader over samples already in memory (one feed dict per get_next())."""

    def __init__(self, samples: Sequence[dict[str, np.ndarray]]):
        self._samples = list(samples)
        self._iter: Optional[Iterator[dict]] = None
        self.rewind()

    def get_next(self) -> Optional[dict[str, np.ndarray]]:
        return next(self._iter, None)

    def rewind(self) -> None:
        self._iter = iter(self._samples)

    def __len__(self) -> int:
        return len(self._samples)
