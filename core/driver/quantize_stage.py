"""compile()'s int8 precision: quantize the float model (core/quantize), compile that, measure the artifact's accuracy."""
from __future__ import annotations

import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping, Optional, Union

from ..errors import KilnError
from .stages import QUANTIZE_SHARE, ProgressFn, Stage


class MissingCalibrationError(KilnError):
    """int8 was asked for without the samples that calibrate it."""

    code = "bad_calibration"


def quantize_options(options: "Any | Mapping[str, Any] | None", threads: Optional[int]):
    """A QuantizeOptions from itself, a plain mapping of its fields (a job's options) or None (the defaults)."""
    from core.quantize import QuantizeOptions

    if isinstance(options, QuantizeOptions):
        return options
    fields = {k: v for k, v in dict(options or {}).items() if k != "calibration"}
    for key in ("keep_float", "op_types"):
        fields[key] = tuple(fields.get(key) or ())
    return QuantizeOptions(**{**fields, "threads": threads or fields.get("threads") or 0})


def quantize_first(model: Union[str, Path, bytes], calibration: Optional[Union[str, Path]], options,
                   notify: ProgressFn, threads: Optional[int]):
    """The QDQ model and its quantization report (core.quantize.QuantizeResult); the first QUANTIZE_SHARE of the bar."""
    from core.quantize import quantize_model

    if calibration is None:
        raise MissingCalibrationError("int8 needs calibration samples: an .npz of real inputs (--calibration DATA.npz)")
    progress = lambda done, detail: notify(Stage.QUANTIZE, QUANTIZE_SHARE * done, f"quantizing: {detail}")
    if isinstance(model, (str, Path)):
        return quantize_model(model, calibration, quantize_options(options, threads), progress=progress)
    with tempfile.TemporaryDirectory(prefix="kiln-int8-") as folder:
        path = Path(folder) / "model.onnx"
        path.write_bytes(model)
        return quantize_model(path, calibration, quantize_options(options, threads), progress=progress)


def manifest_options(options, calibration: "str | Path", threads: Optional[int]) -> dict:
    """The manifest's record of an int8 compile: the quantization options and the calibration samples' sha256 (a
    rebuild quantizes again from the same float model and samples; quantize_static is deterministic)."""
    import hashlib

    fields = asdict(quantize_options(options, threads))
    fields.pop("threads")
    return {"quantization": {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()},
            "calibration_sha256": hashlib.sha256(Path(calibration).read_bytes()).hexdigest()}


def after_quantizing(notify: ProgressFn) -> ProgressFn:
    """The compile's own progress, placed after the quantize step's share of the bar."""
    return lambda stage, done, detail: notify(stage, QUANTIZE_SHARE + (1 - QUANTIZE_SHARE) * done, detail)


def accuracy_on_artifact(module, result) -> dict:
    """The report's `quantization` section with its accuracy measured on the compiled artifact (what the user
    deploys) on the held-back samples, against the float32 model; the QDQ model's own figure (ONNX Runtime, Q/DQ
    unfused) stays beside it as `accuracy.onnxruntime_qdq`."""
    from core.quantize import accuracy

    names = list(result.reference)
    ours = {name: [] for name in names}
    for feeds in result.held_back:
        outputs = module.run(feeds)
        for name in names:
            ours[name].append(outputs[name])
    errors = accuracy.compare(result.reference, ours)
    section = dict(result.report)
    worst = accuracy.worst_rel_err(errors)
    section["accuracy"] = {**section["accuracy"], "outputs": [asdict(e) for e in errors], "rel_err": worst,
                           "measured_on": "kiln artifact", "onnxruntime_qdq": section["accuracy"]["outputs"]}
    if section.get("max_error") is not None:
        section["budget_met"] = worst <= section["max_error"]
    return section


def accuracy_not_measured(result, why: str) -> dict:
    """The section when the artifact cannot run here: the QDQ model's figure (ONNX Runtime), saying so."""
    section = dict(result.report)
    section["accuracy"] = {**section["accuracy"], "measured_on": f"the QDQ model in ONNX Runtime ({why})"}
    return section
