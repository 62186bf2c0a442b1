"""Schemas of a job's production options: the CI gate's baseline, and the rebuild and comparison answers."""
from __future__ import annotations

from pathlib import PurePath
from typing import Any, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field


class BaselineRequest(BaseModel):
    """Gate the new build against an earlier job's build of the same model, timed on the same worker in one run."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    job_id: str = Field(min_length=1, max_length=64, description="a succeeded job of the same model (sha256)")
    max_slowdown: float = Field(default=0.05, ge=0, le=100,
                                description="fail when the new build's median latency exceeds (1 + this) x the baseline's")
    max_error_growth: float = Field(default=2.0, ge=1, le=1e6,
                                    description="fail when its max abs error against ONNX Runtime exceeds this x the "
                                                "baseline's (errors below 1e-6 count as 1e-6)")


_LIVE_OPTIONS = ("tuning_progress",)  # live state the worker keeps in Job.options, shown by JobOut instead


def public_options(options: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    """A job's stored options as answers show them: the files the server keeps for it (validation inputs,
    calibration samples, a baseline's or rebuilt job's artifact) by their file name, never their server path."""
    def named(section: Optional[Mapping[str, Any]], key: str) -> Optional[dict[str, Any]]:
        if not isinstance(section, Mapping):
            return section
        return {**section, key: PurePath(section[key]).name} if section.get(key) else dict(section)

    shown = {k: v for k, v in (options or {}).items() if k not in _LIVE_OPTIONS}
    if shown.get("validation_inputs"):
        shown["validation_inputs"] = PurePath(shown["validation_inputs"]).name
    for section, key in (("quantization", "calibration"), ("baseline", "artifact"), ("rebuild", "artifact")):
        if section in shown:
            shown[section] = named(shown[section], key)
    return shown


class JobSide(BaseModel):
    """One job of a comparison: its settings, report sections and manifest."""

    id: str
    target: str
    opt_level: int
    status: str
    options: dict[str, Any]
    report: Optional[dict[str, Any]] = Field(description="the job's report.json, once it succeeded")


class Comparison(BaseModel):
    """Two jobs of one model side by side, and where their manifests differ."""

    a: JobSide
    b: JobSide
    manifest_differences: list[dict[str, Any]] = Field(
        description="[{key, a, b}] for every manifest entry (dotted path) that differs")
