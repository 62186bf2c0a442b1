"""Samples of a model's inputs from .npz files (validation inputs, calibration): size-limited, no pickles, and every
member's .npy header read before numpy allocates what it declares."""
from __future__ import annotations

import math
import zipfile
from pathlib import Path
from typing import Mapping, Sequence, Union

import numpy as np

from ..errors import ValidationInputError

MAX_VALIDATION_INPUT_BYTES = 256 << 20  # uncompressed, all files together
InputSource = Union[str, Path, bytes]


def load_validation_inputs(sources: "InputSource | Sequence[InputSource]", inputs: Mapping[str, tuple[tuple, str]],
                           max_bytes: int = MAX_VALIDATION_INPUT_BYTES) -> list[dict[str, np.ndarray]]:
    """Samples from .npz files (paths or bytes) keyed by input name; `inputs` maps each model input to (shape, dtype).
    An array of the input's shape is one sample; one more leading axis holds several. Anything else is one
    ValidationInputError naming the file and the input."""
    if isinstance(sources, (str, Path, bytes, bytearray)):
        sources = [sources]
    if not sources:
        raise ValidationInputError("no validation inputs were given")
    samples: list[dict[str, np.ndarray]] = []
    budget = max_bytes
    for number, source in enumerate(sources):
        label = str(source) if isinstance(source, (str, Path)) else f"validation inputs #{number + 1}"
        arrays = _read_npz(source, label, budget)
        budget -= sum(a.nbytes for a in arrays.values())
        samples.extend(_samples_of(arrays, inputs, label))
    return samples


def _read_npz(source: InputSource, label: str, budget: int) -> dict[str, np.ndarray]:
    import io

    try:
        if isinstance(source, (str, Path)):
            if Path(source).stat().st_size > budget:
                raise ValidationInputError(f"{label}: larger than the {budget >> 20} MiB allowed for validation inputs")
            handle = open(source, "rb")
        else:
            handle = io.BytesIO(bytes(source))
        with handle, zipfile.ZipFile(handle) as archive:
            members = archive.infolist()
            if sum(m.file_size for m in members) > budget:  # a zip bomb stops here, before anything inflates
                raise ValidationInputError(f"{label}: its arrays take more than the {budget >> 20} MiB allowed "
                                           f"for validation inputs")
            names = [m.filename for m in members]
            bad = [n for n in names if not n.endswith(".npy")]
            if bad:
                raise ValidationInputError(f"{label}: not an .npz of arrays (it holds {', '.join(bad[:3])})")
            _check_headers(archive, label, budget)
            handle.seek(0)
            with np.load(handle, allow_pickle=False) as npz:
                return {key: npz[key] for key in npz.files}
    except ValidationInputError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zipfile.LargeZipFile) as err:
        raise ValidationInputError(f"{label}: not a readable .npz file ({str(err).splitlines()[0] if str(err) else type(err).__name__})") from None


def _samples_of(arrays: Mapping[str, np.ndarray], inputs: Mapping[str, tuple[tuple, str]], label: str) -> list[dict]:
    missing = [n for n in inputs if n not in arrays]
    unknown = [n for n in arrays if n not in inputs]
    if missing or unknown:
        parts = ([f"missing input(s) {', '.join(map(repr, missing))}"] if missing else []) + (
            [f"unknown name(s) {', '.join(map(repr, unknown))}"] if unknown else [])
        raise ValidationInputError(f"{label}: {'; '.join(parts)}; the model takes {', '.join(map(repr, inputs))}")
    counts = {}
    for name, (shape, dtype) in inputs.items():
        arr = arrays[name]
        if arr.dtype != np.dtype(dtype):
            raise ValidationInputError(f"{label}: input {name!r} is {arr.dtype}, the model takes {np.dtype(dtype)}")
        if _fits(arr.shape, shape):
            counts[name] = None
        elif arr.ndim == len(shape) + 1 and _fits(arr.shape[1:], shape) and arr.shape[0] > 0:
            counts[name] = arr.shape[0]
        else:
            raise ValidationInputError(f"{label}: input {name!r} has shape {list(arr.shape)}, the model takes "
                                       f"{list(shape)} (or [N, {', '.join(map(str, shape))}] for N samples)")
    stacked = {c for c in counts.values() if c is not None}
    if len(stacked) > 1:
        raise ValidationInputError(f"{label}: inputs hold different numbers of samples ({sorted(stacked)})")
    n = stacked.pop() if stacked else None
    if n is None:
        return [{name: _dense(arrays[name]) for name in inputs}]
    return [{name: _dense(arrays[name][i] if counts[name] is not None else arrays[name]) for name in inputs}
            for i in range(n)]


def _dense(array: np.ndarray) -> np.ndarray:
    """C-contiguous, keeping a 0-d array (a scalar input) 0-d, which np.ascontiguousarray makes [1]."""
    return np.require(array, requirements="C")


def _fits(shape: tuple, wanted: tuple) -> bool:
    """`shape` is `wanted`, where a dimension that is not a number (a symbolic one, before it is fixed) fits any size."""
    return len(shape) == len(wanted) and all(not isinstance(w, int) or s == w for s, w in zip(shape, wanted))


def _check_headers(archive: zipfile.ZipFile, label: str, budget: int) -> None:
    """Every member an .npy array of numbers whose headers declare `budget` bytes at most in all: numpy would
    allocate what a 1 KB header claims (10**11 floats: MemoryError), or hand back a member that is no array."""
    declared = 0
    for member in archive.infolist():
        with archive.open(member) as handle:
            try:
                version = np.lib.format.read_magic(handle)
                read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)
                shape, _, dtype = read_header(handle)
            except (ValueError, EOFError, SyntaxError, TypeError) as err:
                raise ValidationInputError(f"{label}: member {member.filename!r} is not an .npy array "
                                           f"({str(err).splitlines()[0] if str(err) else type(err).__name__})") from None
        if dtype.hasobject:
            raise ValidationInputError(f"{label}: member {member.filename!r} holds Python objects, not numbers")
        declared += math.prod(shape) * dtype.itemsize
        if declared > budget:
            raise ValidationInputError(f"{label}: its arrays declare more than the {budget >> 20} MiB allowed "
                                       f"(member {member.filename!r} is {'x'.join(map(str, shape))} {dtype})")
