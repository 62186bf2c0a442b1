"""Compile jobs: create (queued on Celery), list, status, live events, cancel, artifact and report."""
from __future__ import annotations

import math
import shutil
from typing import Annotated, Literal, Optional

import numpy as np
from fastapi import APIRouter, HTTPException, Query, Request, Response, status
from fastapi.responses import FileResponse, HTMLResponse, StreamingResponse
from sqlalchemy import func, or_, select

from core.driver.shape_ranges import check_ranges_supported, parse_dim
from core.errors import ShapeError
from core.errors import UnsupportedOnTargetError
from service.core import storage
from service.core.job_state import ACTIVE, cancel, finish
from service.core.queues import announced_measure_kinds, host_device_kinds, untunable_reason
from service.core.worker_beats import workers_seen
from service.core.settings import Settings
from service.core.tables import Job, Model, new_id

from ..auth import bearer_token
from ..deps import DbDep, SettingsDep, UserDep, owned
from ..events import job_events
from ..rate_limits import JobAllowed
from ..schemas.jobs import JobCreate, JobOut, JobStatus
from ..baselines import baseline_options
from .models import owned_model

router = APIRouter(prefix="/jobs", tags=["jobs"])
MAX_OFFSET = 2**63 - 1  # the databases' 64-bit integer: a larger offset is a 422, not an overflow deep in the driver


def owned_job(db, user, job_id: str) -> Job:
    return owned(db, user, Job, job_id, "job")


def _refuse(message: str) -> HTTPException:
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, message)


def _itemsize(dtype: str) -> int:
    try:
        return np.dtype(dtype).itemsize
    except TypeError:
        return 8


def _check_server_limits(body: JobCreate, settings: Settings) -> None:
    """What this server allows: tuning trials and time, and a worker that can measure the target's code."""
    if body.tuning.trials > settings.max_tuning_trials:
        raise _refuse(f"tuning.trials {body.tuning.trials} is over this server's limit of {settings.max_tuning_trials}")
    if body.tuning.trials > 0:
        kinds = settings.measure_kinds if settings.measure_kinds is not None else host_device_kinds()
        kinds = kinds + [k for k in announced_measure_kinds(workers_seen(settings.data_dir)) if k not in kinds]
        reason = untunable_reason(body.resolved_target, body.target, kinds, "no worker of this server")
        if reason:
            raise _refuse(f"{reason}; compile it with tuning.trials = 0")
    budget = body.tuning.time_budget_s
    if budget is not None and budget > settings.job_soft_time_limit_s:
        raise _refuse(f"tuning.time_budget_s {budget:g} is over this server's job time limit of "
                      f"{settings.job_soft_time_limit_s} s")


def _check_input_shapes(input_shapes: dict[str, list], summary: dict, settings: Settings) -> None:
    """input_shapes against the model's inputs (names, declared shapes, tensor size); every symbolic input fixed."""
    names = {i["name"] for i in summary["inputs"]}
    unknown = sorted(set(input_shapes) - names)
    if unknown:
        raise _refuse(f"input_shapes names unknown inputs {unknown}; the model's inputs are {sorted(names)}")
    declared = {i["name"]: i["shape"] for i in summary["inputs"]}
    itemsizes = {i["name"]: _itemsize(i["dtype"]) for i in summary["inputs"]}
    for name, dims in input_shapes.items():
        shape = declared[name]
        ranged = [a for a, d in enumerate(dims) if isinstance(d, str)]  # "1..8": validated by JobCreate
        if shape is not None and len(dims) == len(shape) and any(isinstance(shape[a], int) for a in ranged):
            axis = next(a for a in ranged if isinstance(shape[a], int))
            raise _refuse(f"input_shapes[{name!r}] dim {axis} is fixed to {shape[axis]} by the model; it cannot take "
                          f"the range {dims[axis]}")
        dims = [d if isinstance(d, int) else parse_dim(d).hi for d in dims]  # the largest shape
        nbytes = math.prod(dims) * itemsizes[name]
        if nbytes > settings.max_tensor_bytes:
            raise _refuse(f"input_shapes[{name!r}] = {dims} would need {nbytes:,} bytes, over this server's "
                          f"limit of {settings.max_tensor_bytes:,} bytes per tensor")
        if shape is not None and (len(dims) != len(shape)
                                  or any(isinstance(d, int) and d != g for d, g in zip(shape, dims))):
            raise _refuse(f"input_shapes[{name!r}] = {dims} does not fit the declared shape {shape}")
    unfixed = [n for n in summary.get("symbolic_inputs", []) if n not in input_shapes]
    if unfixed:
        raise _refuse(f"inputs {unfixed} have symbolic dimensions: give their shapes in input_shapes")


def _check_trip_bound(body: JobCreate, summary: dict) -> None:
    """A loop run at run time whose outputs need room for every iteration: the job must bound its trip count."""
    if summary.get("needs_trip_bound") and body.max_trip_count is None:
        raise _refuse("the model has a loop whose trip count is known only at run time and whose outputs need room "
                      "for every iteration: give max_trip_count (the most iterations it may make)")


def _check_ranges(body: JobCreate) -> None:
    """Declared ranges: refused for what core.compile refuses them for, before anything is queued (the same check)."""
    if not any(isinstance(d, str) for dims in body.input_shapes.values() for d in dims):
        return
    try:
        check_ranges_supported(bisect=body.validation.bisect)
    except ShapeError as err:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, {"code": err.code, "message": str(err)}) from None


def _check_target_ops(body: JobCreate, summary: dict) -> None:
    """Every op of the model the target cannot compile, before anything is queued (models uploaded before
    the check existed have no `op_types`: their compile refuses them the same way)."""
    try:
        body.resolved_backend.check_ops(summary.get("op_types", ()), body.resolved_target)
    except UnsupportedOnTargetError as err:
        opset = summary.get("opsets", {}).get("ai.onnx")
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, {
            "code": err.code, "message": str(err), "target": body.target,
            "unsupported_ops": [{"domain": "ai.onnx", "op": op, "opset": opset} for op in err.ops]}) from None


def _copy_validation_inputs(inputs_id: str, model_id: str, job_id: str, settings: Settings):
    """The job's own copy of inputs uploaded for its model (POST /models/{id}/validation-inputs)."""
    source = storage.validation_inputs_path(settings, model_id, inputs_id)
    if not inputs_id.isalnum() or not source.is_file():
        raise _refuse(f"validation.inputs_id {inputs_id!r}: no such validation inputs were uploaded for model {model_id!r}")
    destination = storage.job_dir(settings, job_id) / storage.JOB_VALIDATION_INPUTS
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, destination)
    return destination


def _quantization_options(body: JobCreate, model: Model, job_id: str, settings: Settings) -> dict:
    """An int8 job's Job.options["quantization"]: its own copy of the calibration samples, checked against the model
    (not quantized already; every --keep-float name one of its nodes)."""
    from core.quantize import is_quantized_op, node_names

    request = body.quantization
    source = storage.calibration_path(settings, model.id, request.calibration_id)
    if not request.calibration_id.isalnum() or not source.is_file():
        raise _refuse(f"quantization.calibration_id {request.calibration_id!r}: no such calibration samples were "
                      f"uploaded for model {model.id!r}")
    already = sorted(op for op in model.summary.get("op_types", ()) if is_quantized_op(op))
    if already:
        raise _refuse(f"the model is already quantized (it has {', '.join(already)}): precision int8 quantizes a "
                      f"float32 model")
    if request.keep_float:
        import onnx

        proto = onnx.load(str(storage.model_path(settings, model.id)), load_external_data=False)
        unknown = [name for name in request.keep_float if name not in node_names(proto)]
        if unknown:
            raise _refuse(f"quantization.keep_float names no node of the model: {', '.join(map(repr, unknown))}")
    destination = storage.job_dir(settings, job_id) / storage.JOB_CALIBRATION
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, destination)
    return {**request.quantize_options(), "calibration": str(destination)}


@router.post("", status_code=status.HTTP_201_CREATED, response_model=JobOut,
             responses={429: {"description": "too many jobs: see Retry-After"}})
def create_job(body: JobCreate, request: Request, user: UserDep, _allowed: JobAllowed, db: DbDep,
               settings: SettingsDep) -> JobOut:
    """Queue a compile of an uploaded model for a target."""
    model = owned_model(db, user, body.model_id)
    _check_server_limits(body, settings)
    _check_input_shapes(body.input_shapes, model.summary, settings)
    _check_ranges(body)
    _check_trip_bound(body, model.summary)
    _check_target_ops(body, model.summary)
    job_id, options = new_id(), body.compile_options()
    if body.validation.inputs_id:
        options["validation_inputs"] = str(_copy_validation_inputs(body.validation.inputs_id, model.id, job_id, settings))
    if body.precision == "int8":
        options.update(precision="int8", quantization=_quantization_options(body, model, job_id, settings))
    if body.baseline is not None:
        options["baseline"] = baseline_options(db, user, body.baseline, model, settings)
    return queue_job(request, db, Job(id=job_id, user_id=user.id, model_id=model.id, target=body.target,
                                      opt_level=body.opt_level, tuning=body.tuning.model_dump(),
                                      input_shapes=body.input_shapes, options=options))


def queue_job(request: Request, db, job: Job) -> JobOut:
    """Store a new job and send it to the workers (a broker that is down fails it at once)."""
    db.add(job)
    db.commit()
    try:
        request.app.state.enqueue(job.id)
    except Exception as err:  # the broker is down: the job must not sit in "queued" forever
        finish(db, job.id, "failed", error=f"the job queue is unavailable ({err})", code="queue_unavailable")
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, f"the job queue is unavailable ({err})") from err
    return JobOut.of(job)


@router.get("", response_model=list[JobOut],
            responses={200: {"headers": {"X-Total-Count": {"description": "jobs that match, over all pages",
                                                           "schema": {"type": "integer"}}}}})
def list_jobs(user: UserDep, db: DbDep, response: Response,
              status_: Annotated[Optional[JobStatus], Query(alias="status")] = None,
              target: Annotated[Optional[str], Query(max_length=128, description="this target only")] = None,
              q: Annotated[Optional[str], Query(max_length=255, description="part of the model's file name or of "
                                                                            "the target, any case")] = None,
              limit: Annotated[int, Query(ge=1, le=500)] = 100, offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0) -> list[JobOut]:
    """The user's jobs, newest first: filtered by status, target and a search text, one page at a time."""
    query = select(Job).where(Job.user_id == user.id)
    if status_:
        query = query.where(Job.status == status_)
    if target:
        query = query.where(Job.target == target)
    if q:
        query = query.join(Model, Model.id == Job.model_id).where(
            or_(Model.filename.icontains(q, autoescape=True), Job.target.icontains(q, autoescape=True)))
    response.headers["X-Total-Count"] = str(db.scalar(select(func.count()).select_from(query.subquery())))
    page = query.order_by(Job.created_at.desc(), Job.id).offset(offset).limit(limit)
    return [JobOut.of(r) for r in db.scalars(page).all()]


@router.get("/{job_id}", response_model=JobOut)
def get_job(job_id: str, user: UserDep, db: DbDep) -> JobOut:
    return JobOut.of(owned_job(db, user, job_id))


@router.delete("/{job_id}", response_model=JobOut,
               responses={204: {"description": "the ended job was removed, with its artifact and report"}})
def cancel_job(job_id: str, user: UserDep, db: DbDep, settings: SettingsDep) -> JobOut | Response:
    """Cancel a queued or running job (a running compile stops at its next stage; answers the job), or remove
    an ended one (succeeded, failed or cancelled) with its artifact and report (answers 204)."""
    job = owned_job(db, user, job_id)
    if job.status not in ACTIVE:
        db.delete(job)
        db.commit()
        storage.remove_job_outputs(settings, job_id)
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    with storage.records_lock(settings):  # no tuning record of this job is published after the answer
        cancel(db, job_id)
    db.refresh(job)
    if job.status == "cancelled":
        storage.remove_job_outputs(settings, job_id)
    return JobOut.of(job)


@router.post("/{job_id}/finish-tuning", response_model=JobOut, status_code=status.HTTP_202_ACCEPTED)
def finish_tuning(job_id: str, user: UserDep, db: DbDep) -> JobOut:
    """Stop tuning now and build with the best configs so far: the worker stops measuring after its current batch
    (the report says `finished_early`). Allowed while a job with a tuning budget is queued or running."""
    job = owned_job(db, user, job_id)
    if job.status not in ACTIVE:
        raise HTTPException(status.HTTP_409_CONFLICT, f"job {job_id!r} is {job.status}: there is no tuning to finish")
    if not (job.tuning or {}).get("trials"):
        raise HTTPException(status.HTTP_409_CONFLICT, f"job {job_id!r} has no tuning budget: there is no tuning to finish")
    job.tuning = {**job.tuning, "finish_now": True}
    db.commit()
    db.refresh(job)
    return JobOut.of(job)


@router.get("/{job_id}/events", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}, "description": "Server-Sent Events"}})
def stream_events(job_id: str, request: Request, user: UserDep, db: DbDep, settings: SettingsDep) -> StreamingResponse:
    """`event: progress` with the job as JSON at every change, until the job ends (`event: end`); a stream whose
    token is revoked ends too (`event: end` with status `unauthorized`)."""
    owned_job(db, user, job_id)
    return StreamingResponse(job_events(request.app.state.db, job_id, bearer_token(request), request,
                                        settings.events_poll_s),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _finished_output(db, user, job_id: str, settings, name: str):
    job = owned_job(db, user, job_id)
    path = storage.job_dir(settings, job_id) / name
    if job.status != "succeeded" or not path.is_file():
        raise HTTPException(status.HTTP_409_CONFLICT if job.status != "succeeded" else status.HTTP_404_NOT_FOUND,
                            f"job {job_id!r} has no {name}: it is {job.status}"
                            + (f" ({job.error})" if job.error else ""))
    return job, path


@router.get("/{job_id}/artifact", response_class=FileResponse,
            responses={200: {"content": {"application/gzip": {}}, "description": "the deployment artifact"}})
def download_artifact(job_id: str, user: UserDep, db: DbDep, settings: SettingsDep) -> FileResponse:
    _, path = _finished_output(db, user, job_id, settings, storage.ARTIFACT)
    return FileResponse(path, media_type="application/gzip", filename=f"kiln-{job_id[:12]}.tar.gz")


@router.get("/{job_id}/report", responses={200: {"content": {"application/json": {}, "text/html": {}}}})
def get_report(job_id: str, user: UserDep, db: DbDep, settings: SettingsDep,
               format: Literal["json", "html"] = "json") -> Response:
    """The compile report: JSON (report.json schema in DESIGN.md), or the HTML page with `?format=html`."""
    name = storage.REPORT_HTML if format == "html" else storage.REPORT_JSON
    _, path = _finished_output(db, user, job_id, settings, name)
    if format == "html":
        return HTMLResponse(path.read_text())
    return Response(path.read_bytes(), media_type="application/json")
