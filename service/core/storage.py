"""Where models and job outputs live on disk, and atomic writes into place (no half-written file is served)."""
from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from core.files.lock import exclusive_lock
from core.files.atomic import write_atomic  # noqa: F401 - job outputs are written with it, as storage.write_atomic

from .settings import Settings

MODEL_FILE = "model.onnx"  # an upload's file in its private folder, kept as the model's
ARTIFACT = "artifact.tar.gz"
REPORT_JSON = "report.json"
REPORT_HTML = "report.html"
JOB_VALIDATION_INPUTS = "validation_inputs.npz"  # a job's copy of the inputs its compile validates on
JOB_CALIBRATION = "calibration.npz"  # an int8 job's copy of the samples it calibrates on


def model_path(settings: Settings, model_id: str) -> Path:
    return settings.models_dir / model_id / MODEL_FILE


def validation_inputs_path(settings: Settings, model_id: str, inputs_id: str) -> Path:
    """An uploaded .npz of validation inputs, kept with the model it was checked against."""
    return settings.models_dir / model_id / "validation" / f"{inputs_id}.npz"


def calibration_path(settings: Settings, model_id: str, calibration_id: str) -> Path:
    """An uploaded .npz of calibration samples (for int8 jobs), kept with the model it was checked against."""
    return settings.models_dir / model_id / "calibration" / f"{calibration_id}.npz"


def job_dir(settings: Settings, job_id: str) -> Path:
    return settings.jobs_dir / job_id


def store_model(settings: Settings, upload_folder: Path, model_id: str) -> Path:
    """Move an upload's private folder into place as the model's folder (one rename)."""
    destination = settings.models_dir / model_id
    os.replace(upload_folder, destination)
    return destination / MODEL_FILE


def remove_job_outputs(settings: Settings, job_id: str) -> None:
    shutil.rmtree(job_dir(settings, job_id), ignore_errors=True)


def remove_model(settings: Settings, model_id: str) -> None:
    shutil.rmtree(settings.models_dir / model_id, ignore_errors=True)


@contextmanager
def records_lock(settings: Settings) -> Iterator[None]:
    """Held while a worker publishes a job's tuning records (after checking that the job still runs) and while the
    API cancels a job: once a cancel is answered, nothing more is recorded for that job."""
    path = Path(f"{settings.records}.lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(path):
        yield
