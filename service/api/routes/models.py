"""Uploaded models: POST streams the file to disk and pre-flight checks it before it is kept."""
from __future__ import annotations

import json
import os
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, Response, status
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from starlette.concurrency import run_in_threadpool

from service.core import storage
from service.core.job_state import ACTIVE
from service.core.tables import Job, Model, new_id

from ..deps import DbDep, SettingsDep, UserDep, owned
from ..model_archive import archive_kind, unpack_model_archive
from ..preflight import run_preflight
from ..rate_limits import UploadAllowed
from ..schemas.models import CalibrationOut, ModelBuildOut, ModelOut, ValidationInputsOut
from ..uploads import receive_upload

router = APIRouter(prefix="/models", tags=["models"])


def owned_model(db, user, model_id: str) -> Model:
    return owned(db, user, Model, model_id, "model")


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ModelOut,
             responses={200: {"description": "the same file was uploaded before: that model is answered"},
                        413: {"description": "over the upload limit"}, 415: {"description": "not multipart"},
                        422: {"description": "not a model Kiln can compile"},
                        429: {"description": "too many uploads: see Retry-After"}})
async def upload_model(request: Request, response: Response, user: UserDep, _allowed: UploadAllowed, db: DbDep,
                       settings: SettingsDep) -> ModelOut:
    """Upload an ONNX model as multipart field `file`: the .onnx file, or a .zip or .tar(.gz) of its folder for a
    model with external data. Checked (ONNX checker, op coverage, sizes) before it is kept."""
    upload = await receive_upload(request, settings.tmp_dir, settings.max_upload_bytes)
    try:
        archived = archive_kind(upload.path) != ""
        if archived:
            await run_in_threadpool(unpack_model_archive, upload.path, upload.folder, settings.max_upload_bytes)
        # Database work runs in the thread pool and ends its transaction before the next await: an
        # upload waiting for its pre-flight check holds no pooled connection, and the event loop never
        # blocks on one (bench_load.py: 50 concurrent uploads deadlocked the pool before this).
        existing = await run_in_threadpool(_existing, db, user.id, upload.sha256)
        if existing is not None:
            response.status_code = status.HTTP_200_OK
            return ModelOut.of(existing, deduplicated=True)
        async with request.app.state.preflight_slots:
            check = await run_preflight(upload.path, settings.preflight_timeout_s, settings.max_tensor_bytes,
                                        with_data_files=archived)
        if not check.ok:
            detail = {"message": check.message, "code": check.code}
            if check.unsupported_ops:
                detail["unsupported_ops"] = check.unsupported_ops
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail)
        row = Model(id=new_id(), user_id=user.id, filename=upload.filename, sha256=upload.sha256,
                    size_bytes=upload.size, summary=check.summary)
        kept, deduplicated = await run_in_threadpool(_keep, db, settings, upload, row)
        if deduplicated:
            response.status_code = status.HTTP_200_OK
        return ModelOut.of(kept, deduplicated=deduplicated)
    finally:
        upload.discard()


@router.post("/{model_id}/validation-inputs", status_code=status.HTTP_201_CREATED, response_model=ValidationInputsOut,
             responses={413: {"description": "over the upload limit"}, 415: {"description": "not multipart"},
                        422: {"description": "not an .npz of the model's inputs (names, shapes, dtypes)"}})
async def upload_validation_inputs(model_id: str, request: Request, user: UserDep, _allowed: UploadAllowed, db: DbDep,
                                   settings: SettingsDep) -> ValidationInputsOut:
    """Upload real inputs to validate a job on (multipart field `file`): an .npz with one array per model input,
    named as the input, of its shape and dtype (a leading axis holds several samples). Checked before it is kept."""
    return await _keep_samples(request, user, db, settings, model_id, _check_validation_inputs, ValidationInputsOut,
                               storage.validation_inputs_path, "bad_validation_inputs")


@router.post("/{model_id}/calibration", status_code=status.HTTP_201_CREATED, response_model=CalibrationOut,
             responses={413: {"description": "over the upload limit"}, 415: {"description": "not multipart"},
                        422: {"description": "not an .npz of at least 2 samples of the model's inputs"}})
async def upload_calibration(model_id: str, request: Request, user: UserDep, _allowed: UploadAllowed, db: DbDep,
                             settings: SettingsDep) -> CalibrationOut:
    """Upload calibration samples for an int8 job (multipart field `file`): an .npz with one array per model input,
    named as the input, with a leading axis of samples (at least 2: 20% are held back to measure the accuracy cost)."""
    return await _keep_samples(request, user, db, settings, model_id, _check_calibration, CalibrationOut,
                               storage.calibration_path, "bad_calibration")


async def _keep_samples(request: Request, user, db, settings, model_id: str, check, out_type, path_of, code: str):
    """Receive an .npz of samples of a model's inputs, `check` it (-> the sample count), keep it where `path_of`
    says and describe it as `out_type` (`code`: a refusal's); the upload is discarded whatever happens. A model
    deleted meanwhile takes the file with it (404): nothing is left that no API reaches."""
    from core.files.npz import MAX_VALIDATION_INPUT_BYTES

    model = await run_in_threadpool(_owned_and_released, db, user, model_id)
    limit = min(settings.max_upload_bytes, MAX_VALIDATION_INPUT_BYTES)
    upload = await receive_upload(request, settings.tmp_dir, limit)
    try:
        samples = await run_in_threadpool(check, upload.path, model.summary, limit)
        row = out_type(id=new_id(), model_id=model.id, samples=samples, size_bytes=upload.size, sha256=upload.sha256)
        await run_in_threadpool(_keep_with_model, db, user, settings, model.id, upload.path,
                                path_of(settings, model.id, row.id))
        return row
    finally:
        upload.discard()


def _keep_with_model(db, user, settings, model_id: str, upload_path, destination) -> None:
    """Moves the upload into the model's folder, and takes it back out if the model was deleted meanwhile (its
    DELETE removes the row, then the folder: whichever order the two ran in, nothing stays behind)."""
    try:
        destination.parent.mkdir(exist_ok=True)  # not its parents: a deleted model's folder is not made again
        os.replace(upload_path, destination)
    except FileNotFoundError:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no model {model_id!r}") from None
    db.expire_all()
    if db.get(Model, model_id) is None:
        storage.remove_model(settings, model_id)
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no model {model_id!r}")
    db.commit()


def _check_calibration(path, summary: dict, limit: int) -> int:
    """The number of samples in the upload; 422 with core's one-line message for anything unusable."""
    from core.quantize import CalibrationError, check_calibration

    wanted = {i["name"]: (tuple(i["shape"] or ()), i["dtype"]) for i in summary["inputs"]}
    try:
        return len(check_calibration(path, wanted, max_bytes=limit, label="the upload"))
    except CalibrationError as err:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, {"message": str(err), "code": err.code}) from None


def _owned_and_released(db, user, model_id: str) -> Model:
    row = owned_model(db, user, model_id)
    db.commit()  # release the connection before the upload streams in
    return row


def _check_validation_inputs(path, summary: dict, limit: int) -> int:
    """The number of samples in the upload; 422 with core's one-line message for anything unusable."""
    from core.files.npz import load_validation_inputs
    from core.errors import ValidationInputError

    wanted = {i["name"]: (tuple(i["shape"] or ()), i["dtype"]) for i in summary["inputs"]}
    try:
        return len(load_validation_inputs(path, wanted, max_bytes=limit))
    except ValidationInputError as err:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                            {"message": str(err).replace(str(path), "the upload"), "code": err.code}) from None


def _existing(db, user_id: int, sha256: str) -> Model | None:
    row = db.scalar(select(Model).where(Model.user_id == user_id, Model.sha256 == sha256))
    db.commit()  # release the connection; the row stays loaded (expire_on_commit=False)
    return row


def _keep(db, settings, upload, row: Model) -> tuple[Model, bool]:
    storage.store_model(settings, upload.folder, row.id)
    db.add(row)
    try:
        db.commit()
    except IntegrityError:  # the same file raced in from a parallel upload: keep the first
        db.rollback()
        storage.remove_model(settings, row.id)
        return _existing(db, row.user_id, row.sha256), True
    return row, False


@router.get("", response_model=list[ModelOut])
def list_models(user: UserDep, db: DbDep) -> list[ModelOut]:
    rows = db.scalars(select(Model).where(Model.user_id == user.id).order_by(Model.created_at.desc())).all()
    return [ModelOut.of(r) for r in rows]


@router.get("/{model_id}", response_model=ModelOut)
def get_model(model_id: str, user: UserDep, db: DbDep) -> ModelOut:
    return ModelOut.of(owned_model(db, user, model_id))


@router.get("/{model_id}/jobs", response_model=list[ModelBuildOut])
def model_history(model_id: str, user: UserDep, db: DbDep, settings: SettingsDep,
                  limit: Annotated[int, Query(ge=1, le=500)] = 100) -> list[ModelBuildOut]:
    """The model's builds over time, oldest first (the newest `limit`): target, options, status, and the latency
    and validation error each succeeded build's report measured."""
    owned_model(db, user, model_id)
    newest = db.scalars(select(Job).where(Job.model_id == model_id, Job.user_id == user.id)
                        .order_by(Job.created_at.desc()).limit(limit)).all()
    return [ModelBuildOut.of(job, _report(settings, job) if job.status == "succeeded" else None)
            for job in reversed(newest)]


def _report(settings, job: Job) -> dict | None:
    try:
        return json.loads((storage.job_dir(settings, job.id) / storage.REPORT_JSON).read_text())
    except (OSError, ValueError):  # outputs removed by hand, or a report from before the schema: no figures
        return None


@router.delete("/{model_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_model(model_id: str, user: UserDep, db: DbDep, settings: SettingsDep) -> Response:
    row = owned_model(db, user, model_id)
    if db.scalar(select(Job.id).where(Job.model_id == model_id, Job.status.in_(ACTIVE)).limit(1)):
        raise HTTPException(status.HTTP_409_CONFLICT, "the model has queued or running jobs; cancel them first")
    job_ids = db.scalars(select(Job.id).where(Job.model_id == model_id)).all()
    db.query(Job).filter(Job.model_id == model_id).delete()
    db.delete(row)
    db.commit()
    for job_id in job_ids:
        storage.remove_job_outputs(settings, job_id)
    storage.remove_model(settings, model_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
