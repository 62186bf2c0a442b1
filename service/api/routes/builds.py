"""A model's builds: rebuild a job from its artifact's manifest, and compare two jobs of one model side by side."""
from __future__ import annotations

import json

from fastapi import APIRouter, HTTPException, Request, status

from core.driver.rebuild import differing_keys, entry_at
from core.errors import ArtifactError
from core.runtime.package import METADATA, read_artifact_member
from service.core import storage
from service.core.tables import Job, Model, new_id

from ..deps import DbDep, SettingsDep, UserDep
from ..rate_limits import JobAllowed
from ..schemas.builds import Comparison, JobSide, public_options
from ..schemas.jobs import JobOut
from .jobs import owned_job, queue_job

router = APIRouter(prefix="/jobs", tags=["jobs"])
_NOT_COPIED = ("tuning_progress", "baseline", "rebuild")  # a rebuild's own options, or live state


def _manifest(settings, job: Job) -> dict:
    try:
        metadata = json.loads(read_artifact_member(storage.job_dir(settings, job.id) / storage.ARTIFACT, METADATA))
    except ArtifactError:
        return {}
    return metadata.get("manifest") or {}


def _report(settings, job: Job) -> dict | None:
    path = storage.job_dir(settings, job.id) / storage.REPORT_JSON
    return json.loads(path.read_text()) if job.status == "succeeded" and path.is_file() else None


@router.post("/{job_id}/rebuild", status_code=status.HTTP_201_CREATED, response_model=JobOut)
def rebuild_job(job_id: str, request: Request, user: UserDep, _allowed: JobAllowed, db: DbDep,
                settings: SettingsDep) -> JobOut:
    """Queue a job that builds the job's model again from its artifact's manifest (same target, options and tuning
    records, no tuning) and compares the result with it: the report's `rebuild` section says identical, or which
    part differs and why."""
    original = owned_job(db, user, job_id)
    if original.status != "succeeded":
        raise HTTPException(status.HTTP_409_CONFLICT, f"job {job_id!r} has not succeeded (it is {original.status}): "
                                                      "there is no build to reproduce")
    options = original.options or {}
    if options.get("precision") == "int8":
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "an int8 job compiles the model it quantized: "
                                                                   "its rebuild is not supported yet")
    manifest = _manifest(settings, original)
    model = db.get(Model, original.model_id)
    if not manifest:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"job {job_id!r}'s artifact has no manifest (it "
                                                                   "was built by a Kiln before manifests)")
    if model is None or model.sha256 != manifest["model_sha256"]:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"the stored model of job {job_id!r} is not the "
                                                                   "one its manifest names")
    rebuild = {"job_id": original.id, "artifact": str(storage.job_dir(settings, original.id) / storage.ARTIFACT),
               "records_applied": manifest.get("records_applied") or []}
    copied = {k: v for k, v in options.items() if k not in _NOT_COPIED}
    return queue_job(request, db, Job(id=new_id(), user_id=user.id, model_id=original.model_id, target=original.target,
                                      opt_level=original.opt_level, tuning=dict(original.tuning or {}),
                                      input_shapes=dict(original.input_shapes or {}), options={**copied, "rebuild": rebuild}))


def _side(settings, job: Job) -> JobSide:
    return JobSide(id=job.id, target=job.target, opt_level=job.opt_level, status=job.status,
                   options=public_options(job.options),
                   report=_report(settings, job))


@router.get("/{job_id}/compare/{other_id}", response_model=Comparison)
def compare_jobs(job_id: str, other_id: str, user: UserDep, db: DbDep, settings: SettingsDep) -> Comparison:
    """Two jobs of the same model side by side: settings, reports (latency, kernels, errors, tuning) and the
    manifest entries that differ."""
    a, b = owned_job(db, user, job_id), owned_job(db, user, other_id)
    models = {m.sha256 for m in (db.get(Model, a.model_id), db.get(Model, b.model_id)) if m is not None}
    if len(models) != 1:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "these jobs compiled different models: only "
                                                                   "builds of the same model compare")
    ma, mb = _manifest(settings, a), _manifest(settings, b)
    differences = [{"key": key, "a": entry_at(ma, key), "b": entry_at(mb, key)} for key in differing_keys(ma, mb)]
    return Comparison(a=_side(settings, a), b=_side(settings, b), manifest_differences=differences)

