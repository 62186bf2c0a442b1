"""Schemas of the models resource (uploaded ONNX files)."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Optional, Union

from pydantic import BaseModel

from service.core.tables import as_utc

from .builds import public_options


class TensorInfo(BaseModel):
    name: str
    shape: Optional[list[Union[int, str]]]  # a string is a symbolic dimension
    dtype: str


class ValidationInputsOut(BaseModel):
    """An uploaded .npz of validation inputs: pass its `id` as a job's `validation.inputs_id`."""

    id: str
    model_id: str
    samples: int
    size_bytes: int
    sha256: str


class CalibrationOut(BaseModel):
    """An uploaded .npz of calibration samples: pass its `id` as a job's `quantization.calibration_id`."""

    id: str
    model_id: str
    samples: int
    size_bytes: int
    sha256: str


class ModelOut(BaseModel):
    id: str
    filename: str
    sha256: str
    size_bytes: int
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    opsets: dict[str, int]
    symbolic_inputs: list[str]
    op_types: list[str] = []  # ONNX ops of the default domain (what GET /targets' unsupported_ops is checked against)
    created_at: datetime
    deduplicated: bool = False

    @classmethod
    def of(cls, row: Any, deduplicated: bool = False) -> "ModelOut":
        s = row.summary
        return cls(id=row.id, filename=row.filename, sha256=row.sha256, size_bytes=row.size_bytes,
                   inputs=s["inputs"], outputs=s["outputs"], opsets=s.get("opsets", {}),
                   symbolic_inputs=s.get("symbolic_inputs", []), op_types=s.get("op_types", []), created_at=as_utc(row.created_at),
                   deduplicated=deduplicated)


class ModelBuildOut(BaseModel):
    """One job of a model's history (GET /models/{id}/jobs): what was asked, how it ended, and what the build
    measured (its report's latency and validation error; null until it succeeded, or when it was skipped)."""

    job_id: str
    status: str
    error_code: Optional[str]
    target: str
    opt_level: int
    tuning: dict[str, Any]
    input_shapes: dict[str, Any]
    options: dict[str, Any]
    attempts: int
    created_at: datetime
    finished_at: Optional[datetime]
    latency_ms: Optional[dict[str, Any]] = None   # {kiln, onnxruntime, ratio} as in report.json
    max_abs_err: Optional[float] = None
    max_rel_err: Optional[float] = None

    @classmethod
    def of(cls, row: Any, report: Optional[dict[str, Any]]) -> "ModelBuildOut":
        report = report or {}
        latency = report.get("latency_ms")
        validation = report.get("validation") or {}
        return cls(job_id=row.id, status=row.status, error_code=row.error_code, target=row.target,
                   opt_level=row.opt_level, tuning=row.tuning, input_shapes=row.input_shapes,
                   options=public_options(row.options), attempts=row.attempts, created_at=as_utc(row.created_at),
                   finished_at=as_utc(row.finished_at),
                   latency_ms=latency if latency and "skipped" not in latency else None,
                   max_abs_err=validation.get("max_abs_err"), max_rel_err=validation.get("max_rel_err"))
