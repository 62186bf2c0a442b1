"""Schemas of the jobs resource (compiles of an uploaded model for a target)."""
from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from core.driver.precision import HALF_PRECISIONS, PRECISIONS
from core.errors import KilnError
from core.backends import Backend, resolve
from core.target import Target
from service.core.tables import as_utc

from .builds import BaselineRequest
from .refusal import refused

JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]


class TuningRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    trials: int = Field(default=0, ge=0, description="schedule tuning budget in measured trials (0: no tuning)")
    time_budget_s: Optional[float] = Field(default=None, gt=0, description="stop tuning after this many seconds")


class ValidationRequest(BaseModel):
    """How the compiled model is checked against ONNX Runtime (README: validation policy)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
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


class QuantizationRequest(BaseModel):
    """How an int8 job quantizes the float32 model before compiling it (the options of `kiln quantize`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    calibration_id: str = Field(min_length=1, max_length=64,
                                description="calibration samples uploaded with POST /models/{model_id}/calibration")
    per_channel: bool = Field(default=False, description="one scale per output channel of each weight")
    method: Literal["minmax", "percentile", "entropy"] = Field(default="minmax", description="calibration method")
    keep_float: list[str] = Field(default_factory=list, max_length=1000, description="node names left in float32")
    max_error: Optional[float] = Field(default=None, gt=0, description=(
        "error budget: the largest relative error ||int8 - fp32|| / ||fp32|| of any output on the held-back "
        "samples; the most sensitive layers fall back to float32 until it holds"))
    sensitivity_layers: int = Field(default=16, ge=0, le=256,
                                    description="measure the sensitivity of at most this many Conv/MatMul/Gemm layers")
    op_types: list[str] = Field(default_factory=list, max_length=100,
                                description="quantize only these op types (empty: every op ORT's QDQ quantizer handles)")

    def quantize_options(self) -> dict[str, Any]:
        """core.quantize.QuantizeOptions' keywords (Job.options["quantization"], the calibration's path added)."""
        return self.model_dump(exclude={"calibration_id"})


class JobCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    model_id: str = Field(min_length=1, max_length=64)
    target: str = Field(default="native", min_length=1, max_length=128, description="see GET /api/v1/targets")
    opt_level: int = Field(default=3, ge=0, le=3)
    tuning: TuningRequest = Field(default_factory=TuningRequest)
    input_shapes: dict[str, list[Union[int, str]]] = Field(
        default_factory=dict, description="fix symbolic input dimensions: {name: [d0, d1, ...]}; a dim may be a range "
                                          "\"1..8\", \"224..512:32\" or a list \"8|128|384\" (one artifact for every "
                                          "shape in range)")
    name: Optional[str] = Field(default=None, max_length=32,
                                description="artifact name: libNAME.so, NAME.h and C symbols NAME_load, NAME_run, ... "
                                            "(several models link into one program); default libkiln_model.so, kiln_load")
    validation: ValidationRequest = Field(default_factory=ValidationRequest)
    precision: Literal[PRECISIONS] = Field(
        default="fp32", description="fp16/bf16: weights stored as float16/bfloat16, float32 arithmetic, validated at "
                                    "that format's tolerance; int8: quantize the float32 model first (needs `quantization`)")
    quantization: Optional[QuantizationRequest] = Field(default=None, description="with precision int8: how to quantize")
    baseline: Optional[BaselineRequest] = Field(default=None, description="CI gate: compare with an earlier build")
    quick: bool = Field(default=False, description="fast iteration: no latency benchmark, validation on one sample "
                                                   "at most (the report says so)")
    max_trip_count: Optional[int] = Field(default=None, ge=1, le=1 << 24,
                                          description="the most iterations a loop whose trip count is known only at "
                                                      "run time may make, where its scan outputs or growing values "
                                                      "need room for every iteration (more stops the run with an error)")
    _target: Target = PrivateAttr()
    _backend: Backend = PrivateAttr()

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
        return {**({"name": self.name} if self.name else {}), **self.validation.compile_options(),
                **({"precision": self.precision} if self.precision in HALF_PRECISIONS else {}),
                **({"quick": True} if self.quick else {}),
                **({"max_trip_count": self.max_trip_count} if self.max_trip_count else {})}

    @field_validator("input_shapes")
    @classmethod
    def _positive_dimensions(cls, shapes: dict[str, list[Union[int, str]]]) -> dict[str, list[Union[int, str]]]:
        """Sizes positive; ranges parsed once here and kept in their canonical text (Job.input_shapes is JSON)."""
        from core.driver.shape_ranges import parse_dim

        parsed = {}
        for name, dims in shapes.items():
            try:
                parsed[name] = [d if isinstance(d, int) else parse_dim(d) for d in dims]
            except KilnError as err:
                raise refused(f"input_shapes[{name!r}]: {err}") from None
            if any(isinstance(d, int) and d < 1 for d in parsed[name]):
                raise refused(f"input_shapes[{name!r}]: dimensions must be positive")
        return {name: [d if isinstance(d, int) else str(d) for d in dims] for name, dims in parsed.items()}

    @model_validator(mode="after")
    def _quantization_with_int8(self) -> JobCreate:
        if self.precision == "int8" and self.quantization is None:
            raise refused("precision int8 needs quantization.calibration_id (POST /models/{model_id}/calibration)")
        if self.precision != "int8" and self.quantization is not None:
            raise refused(f"quantization is for precision int8, not {self.precision}")
        return self

    @model_validator(mode="after")
    def _resolve_target(self) -> JobCreate:
        try:
            self._target, self._backend = resolve(self.target)
        except KilnError as err:
            raise refused(str(err)) from None
        return self

    @property
    def resolved_target(self) -> Target:
        """`target` resolved once, at the API boundary; `target` (stored, queued) keeps the request's spelling."""
        return self._target

    @property
    def resolved_backend(self) -> Backend:
        """`resolved_target`'s Backend, looked up with it."""
        return self._backend


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
    precision: str = Field(default="fp32", description="fp32, fp16, bf16 or int8 (quantized by the job)")
    gate: Optional[dict[str, Any]] = Field(
        default=None, description="a CI-gated job's verdict against its baseline once it ended: {passed, verdict, "
                                  "message}; a job that built but failed its gate is `succeeded` with passed false")
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
                   tuning_progress=(row.options or {}).get("tuning_progress"),
                   precision=(row.options or {}).get("precision") or "fp32", gate=(row.options or {}).get("gate"))
