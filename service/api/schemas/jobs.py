"""Schemas of the jobs resource (compiles of an uploaded model for a target)."""
from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from core.errors import KilnError
from core.target import Target, get_target
from service.core.tables import as_utc

from .refusal import refused

JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]


class TuningRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    trials: int = Field(default=0, ge=0, description="schedule tuning budget in measured trials (0: no tuning)")
    time_budget_s: Optional[float] = Field(default=None, gt=0, description="stop tuning after this many seconds")


class ValidationRequest(BaseModel):
    """How the compiled model is checked against ONNX Runtime (README: validation policy)."""

    model_config = ConfigDict(extra="forbid")
    mode: Literal["error", "warn", "off"] = Field(
        default="error", description="on a mismatch: fail the job (error), keep the artifact and report it (warn); "
                                     "or do not validate (off)")
    tolerance: Optional[list[float]] = Field(default=None, min_length=1, max_length=2,
                                             description="[atol] or [atol, rtol] for float outputs; default: the policy")
    inputs_id: Optional[str] = Field(default=None, min_length=1, max_length=64,
                                     description="validation inputs uploaded with POST /models/{model_id}/validation-inputs")
    bisect: bool = Field(default=False, description="compare every kernel's output (a mismatch always does)")

    @field_validator("tolerance")
    @classmethod
    def _usable_tolerance(cls, tolerance: Optional[list[float]]) -> Optional[list[float]]:
        if tolerance is not None and any(not math.isfinite(v) or v < 0 for v in tolerance):
            raise refused("validation.tolerance: atol and rtol must be finite and >= 0")
        return tolerance

    def compile_options(self) -> dict[str, Any]:
        """core.compile's keywords for this request (the inputs' stored path is added by the route)."""
        out: dict[str, Any] = {}
        if self.mode != "error":
            out["validate"] = self.mode
        if self.tolerance is not None:
            out["tolerance"] = list(self.tolerance)
        if self.bisect:
            out["bisect"] = True
        return out


class JobCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model_id: str = Field(min_length=1, max_length=64)
    target: str = Field(default="native", min_length=1, max_length=128, description="see GET /api/v1/targets")
    opt_level: int = Field(default=3, ge=0, le=3)
    tuning: TuningRequest = Field(default_factory=TuningRequest)
    input_shapes: dict[str, list[int]] = Field(default_factory=dict,
                                               description="fix symbolic input dimensions: {name: [d0, d1, ...]}")
    name: Optional[str] = Field(default=None, max_length=32,
                                description="artifact name: libNAME.so, NAME.h and C symbols NAME_load, NAME_run, ... "
                                            "(several models link into one program); default libkiln_model.so, kiln_load")
    validation: ValidationRequest = Field(default_factory=ValidationRequest)
    _target: Target = PrivateAttr()

    @field_validator("name")
    @classmethod
    def _usable_name(cls, name: Optional[str]) -> Optional[str]:
        from core.runtime.naming import artifact_names

        try:
            artifact_names(name)
        except KilnError as err:
            raise refused(str(err)) from None
        return name

    def compile_options(self) -> dict[str, Any]:
        """The job's compile options beyond target, level, tuning and shapes (stored in Job.options)."""
        return {**({"name": self.name} if self.name else {}), **self.validation.compile_options()}

    @field_validator("input_shapes")
    @classmethod
    def _positive_dimensions(cls, shapes: dict[str, list[int]]) -> dict[str, list[int]]:
        for name, dims in shapes.items():
            if any(d < 1 for d in dims):
                raise refused(f"input_shapes[{name!r}]: dimensions must be positive")
        return shapes

    @model_validator(mode="after")
    def _resolve_target(self) -> JobCreate:
        try:
            self._target = get_target(self.target)
        except KilnError as err:
            raise refused(str(err)) from None
        return self

    @property
    def resolved_target(self) -> Target:
        """`target` resolved once, at the API boundary; `target` (stored, queued) keeps the request's spelling."""
        return self._target


class JobOut(BaseModel):
    id: str
    model_id: str
    target: str
    opt_level: int
    tuning: dict[str, Any]
    input_shapes: dict[str, Any]
    status: JobStatus
    stage: str
    progress: float
    error: Optional[str]
    error_code: Optional[str]
    attempts: int
    worker: Optional[str]
    created_at: datetime
    started_at: Optional[datetime]
    finished_at: Optional[datetime]
    tuning_progress: Optional[dict[str, Any]] = Field(
        default=None, description="while it tunes: trials, planned, best_gflops so far, left_s, estimate_s, finishing")
    links: dict[str, str]

    @classmethod
    def of(cls, row: Any) -> "JobOut":
        base = f"/api/v1/jobs/{row.id}"
        links = {"self": base, "events": f"{base}/events"}
        if row.status == "succeeded":
            links.update(artifact=f"{base}/artifact", report=f"{base}/report")
        return cls(id=row.id, model_id=row.model_id, target=row.target, opt_level=row.opt_level, tuning=row.tuning,
                   input_shapes=row.input_shapes, status=row.status, stage=row.stage, progress=row.progress,
                   error=row.error, error_code=row.error_code, attempts=row.attempts, worker=row.worker,
                   created_at=as_utc(row.created_at), started_at=as_utc(row.started_at),
                   finished_at=as_utc(row.finished_at), links=links,
                   tuning_progress=(row.options or {}).get("tuning_progress"))
