"""A new job's CI-gate baseline: an earlier succeeded build of the same model, checked when the job is created."""
from __future__ import annotations

from fastapi import HTTPException, status

from service.core import storage
from service.core.settings import Settings
from service.core.tables import Job, Model

from .schemas.builds import BaselineRequest


def baseline_options(db, user, request: BaselineRequest, model: Model, settings: Settings) -> dict:
    """Job.options["baseline"]: the baseline job's artifact and the gate's policy (422 when it cannot serve)."""
    def refuse(message: str) -> HTTPException:
        return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"baseline.job_id {request.job_id!r}: {message}")

    base = db.get(Job, request.job_id)
    if base is None or base.user_id != user.id:
        raise refuse("no such job")
    if base.status != "succeeded":
        raise refuse(f"the job has not succeeded (it is {base.status}): it has no build to compare with")
    base_model = db.get(Model, base.model_id)
    if base_model is None or base_model.sha256 != model.sha256:
        raise refuse("that job compiled another model: a baseline must be a build of the same model (same sha256)")
    artifact = storage.job_dir(settings, base.id) / storage.ARTIFACT
    if not artifact.is_file():
        raise refuse("its artifact is gone")
    return {"job_id": base.id, "artifact": str(artifact), **request.model_dump(exclude={"job_id"})}
