"""The compile job: re-read the job, run `core.compile` in a sandboxed child, write progress as it goes,
publish outputs atomically.

Idempotent by job id: a job that already ended is skipped, and a redelivered running job (its worker
died) starts over and overwrites nothing until it succeeds. The compile runs in a forked child with
resource limits (workers.compile_child), so a crash in generated code fails only this job.
"""
from __future__ import annotations

import json
import logging
import signal
import socket
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Callable, Optional

from celery.exceptions import SoftTimeLimitExceeded
from sqlalchemy.orm import Session

from core.backends import resolve
from core.driver.stages import ProgressFn, Stage
from core.errors import KilnError, message_for_users
from core.process.sandbox import SandboxError, SandboxTimeout, run_sandboxed
from core.tune.remote import RemoteMeasurement
from service.core import storage
from service.core.db import Database
from service.core.job_state import ACTIVE, TERMINAL, finish, transition
from service.core.queues import measured_remotely
from service.core.settings import Settings
from service.core.tables import Job, utcnow

from .compile_child import (compile_into, compile_limits, finish_tuning_flag, publish, remove_staging, staged_records,
                            staging_dir)
from .measure_dispatch import remote_measurement

log = logging.getLogger("kiln.worker")


class JobCancelled(Exception):
    """The user cancelled the job while it ran; raised from the progress callback to stop the compile."""


def _progress_writer(db: Session, job_id: str, min_interval_s: float = 0.2, attempt: int | None = None) -> ProgressFn:
    """Writes the compile's progress into the job: its stage reads the stage's label or detail (`tuning 12/200`)."""
    last = {"stage": None, "at": 0.0}

    def report(stage: Stage, fraction: float, detail: str = "") -> None:
        name = detail or stage.label
        now = time.monotonic()
        if name == last["stage"] and now - last["at"] < min_interval_s:
            return
        last.update(stage=name, at=now)
        if not transition(db, job_id, ("running",), attempt=attempt, stage=name,
                          progress=round(min(max(fraction, 0.0), 0.99), 4)):
            raise JobCancelled(job_id)
    return report


def publish_records(settings: Settings, db: Session, job_id: str, attempt: int, staging: Path) -> None:
    """Moves the records the child staged into the shared records, if the job is still this attempt's and running:
    checked and moved under the lock the API's cancel takes, so nothing is recorded after a cancel was answered."""
    import fcntl

    from core.tune.records import append_records, load_records

    staged = staged_records(staging)
    if not staged.is_file():
        return
    with storage.records_lock(settings):
        db.expire_all()
        job = db.get(Job, job_id)
        db.commit()
        if job is None or job.status != "running" or job.attempts != attempt:
            return
        with open(staged, "r+") as handle:  # the child appends under this file's lock
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                records = list(load_records(staged))
                handle.truncate(0)
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
        append_records(settings.records, records)


MAX_CURVE_POINTS = 120  # per curve in Job.options["tuning_progress"]: every other point goes when it is full


def _add_curve_points(live: dict, status: dict) -> None:
    """The live chart's data: per task, best GFLOP/s against the job's trials so far; for the model, the tasks tuned
    so far together (their FLOPs over their summed times at each one's best); and the best of any task."""
    def append(points: list, point: list) -> None:
        points.append(point)
        if len(points) > MAX_CURVE_POINTS:
            del points[1:-1:2]

    best, flops = status.get("best_gflops"), status.get("flops")
    if not isinstance(best, (int, float)) or best <= 0:
        return
    curves = live.setdefault("curves", {})
    curve = curves.setdefault(status["workload"], {"flops": flops, "points": []})
    append(curve["points"], [status["trials"], best])
    tuned = [(c["flops"], c["points"][-1][1]) for c in curves.values() if c["flops"] and c["points"]]
    if tuned:
        model = sum(f for f, _ in tuned) / sum(f / g for f, g in tuned)
        append(live.setdefault("model_points", []), [status["trials"], round(model, 3)])
    if best >= (live.get("best_overall") or {}).get("gflops", 0):
        live["best_overall"] = {"gflops": best, "workload": status["workload"]}


def _tuning_writer(settings: Settings, db: Session, job: Job, attempt: int,
                   staging: Path) -> Callable[[str, dict], None]:
    """Writes a tuning job's live state into Job.options["tuning_progress"] (trials, best GFLOP/s so far, seconds
    left, the estimate before it starts) and, once the user asked to finish now (Job.tuning["finish_now"], set by
    the API), tells the child to stop measuring through its flag file."""
    live: dict = {}

    def report(kind: str, status: dict) -> None:
        if kind == "tuning_plan":
            live.clear()
            live.update(trials=0, planned=status["trials"], estimate_s=status["estimate_s"],
                        left_s=status["estimate_s"], cache_hits=status["cache_hits"], best_gflops=None)
        else:
            live.update(status)
            _add_curve_points(live, status)
        db.expire_all()
        current = db.get(Job, job.id)
        if current is not None and (current.tuning or {}).get("finish_now"):
            finish_tuning_flag(staging).touch()
            live["finishing"] = True
        if not transition(db, job.id, ("running",), attempt=attempt,
                          options={**(job.options or {}), "tuning_progress": dict(live)}):
            raise JobCancelled(job.id)
        if kind == "tuning":  # a batch was measured: its records serve other jobs from now on
            publish_records(settings, db, job.id, attempt, staging)
    return report


def _compile(settings: Settings, job: Job, db: Session, attempt: int) -> None:
    """core.compile in a sandboxed child that writes into a staging folder; published here only on success."""
    remove_staging(settings, job.id)  # what an earlier, killed attempt left behind
    staging = staging_dir(settings, job.id)
    progress = _progress_writer(db, job.id, attempt=attempt)
    tuning = _tuning_writer(settings, db, job, attempt, staging)
    stage = {"name": "importing"}

    def on_message(kind: str, *message) -> None:
        if kind != "progress":  # "tuning_plan", "tuning"
            tuning(kind, *message)  # raises JobCancelled too
            return
        step, fraction, detail = message
        stage["name"] = detail or step.label
        progress(step, fraction, detail)  # raises JobCancelled: the child is killed at once

    try:
        try:
            run_sandboxed(compile_into, str(storage.model_path(settings, job.model_id)), str(staging),
                          target=job.target, opt_level=job.opt_level,
                          input_shapes={k: tuple(v) for k, v in job.input_shapes.items()} or None,
                          threads=settings.compile_threads, max_tensor_bytes=settings.max_tensor_bytes,
                          tuning=job.tuning, records=str(settings.records), options=job.options or None,
                          timing_lock=str(settings.timing_lock_file) if settings.timing_lock_file else None,
                          remote=_remote_measurement(settings, job, attempt),
                          kernel_cache=settings.kernel_cache_setting,
                          limits=compile_limits(settings), on_message=on_message, what="the compile")
        except SandboxError as err:
            if isinstance(err, SandboxTimeout):
                raise
            # Which stage it died in tells the user (and us) whether generated code was running.
            crashed = type(err)(f"{err} while {stage['name']}")
            crashed.code = err.code
            raise crashed from None
        if not transition(db, job.id, ("running",), attempt=attempt, stage="packaging", progress=0.99):
            raise JobCancelled(job.id)
        publish(staging, storage.job_dir(settings, job.id))
        _keep_gate_verdict(settings, db, job.id, attempt)
    finally:
        if _still_owned(db, job.id, attempt):  # else a later attempt (this worker was cut off) owns the staging
            publish_records(settings, db, job.id, attempt, staging)  # the last batches; none once cancelled
            remove_staging(settings, job.id)


def _keep_gate_verdict(settings: Settings, db: Session, job_id: str, attempt: int) -> None:
    """A CI-gated job's verdict from its report into Job.options["gate"], so that lists show a failed gate (the job
    itself succeeded: it built, and its artifact and report are there)."""
    try:
        baseline = json.loads((storage.job_dir(settings, job_id) / storage.REPORT_JSON).read_text()).get("baseline")
    except (OSError, ValueError):
        return
    if not isinstance(baseline, dict):
        return
    db.expire_all()
    options = dict(db.get(Job, job_id).options or {})
    options["gate"] = {"passed": bool(baseline.get("passed")), "verdict": baseline.get("verdict"),
                       "message": baseline.get("message")}
    transition(db, job_id, ("running",), attempt=attempt, options=options)


def _remote_measurement(settings: Settings, job: Job, attempt: int) -> Optional[RemoteMeasurement]:
    """A tuning job for another CPU family measures on measure.<kind>; its batches are named by job and attempt, so
    a redelivered batch of this attempt is answered once and a later attempt's never mixes with it. Made here, used
    in the compile child (the Celery client connects there, after the fork)."""
    target, backend = resolve(job.target)
    if not measured_remotely(target, backend, int((job.tuning or {}).get("trials") or 0)):
        return None
    return remote_measurement(settings, target, backend, f"{job.id}-{attempt}")


def _still_owned(db: Session, job_id: str, attempt: int) -> bool:
    try:
        db.expire_all()
        job = db.get(Job, job_id)
        return job is None or job.attempts == attempt
    except Exception:  # the database is unreachable: clean up as before, a later attempt starts by doing so too
        db.rollback()
        return True


class Heartbeat:
    """Writes the job's heartbeat from a thread while the compile runs, so the sweeper knows it is alive."""

    def __init__(self, database: Database, job_id: str, attempt: int, interval_s: float):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, args=(database, job_id, attempt, interval_s), daemon=True,
                                        name=f"heartbeat-{job_id[:8]}")

    def _beat(self, database: Database, job_id: str, attempt: int, interval_s: float) -> None:
        # A SIGTERM delivered to this thread would wait for the main thread's next bytecode; blocked
        # here, it interrupts the main thread wherever it waits (see workers.celery_app).
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        while not self._stop.wait(interval_s):
            try:
                with database.session() as db:
                    transition(db, job_id, ("running",), attempt=attempt, heartbeat_at=utcnow())
            except Exception:  # a busy database must not kill the compile; the next beat tries again
                log.warning("heartbeat of job %s failed", job_id, exc_info=True)

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _alive_elsewhere(job: Job, settings: Settings) -> bool:
    """A running job whose heartbeat is fresh: this delivery is a duplicate of one still being worked on."""
    return (job.status == "running" and job.heartbeat_at is not None
            and utcnow() - job.heartbeat_at < timedelta(seconds=settings.stale_after_s))


def _after_lost_race(db: Session, settings: Settings, job_id: str) -> str:
    """The job ended while we worked: cancelled (drop our outputs) or finished by another delivery (keep them);
    or a later attempt took it over (this worker was cut off): that one's status, the job is its now."""
    db.expire_all()
    status = db.get(Job, job_id).status
    if status == "cancelled":
        storage.remove_job_outputs(settings, job_id)
    return status


def run_compile_job(job_id: str, settings: Settings, database: Database, *, worker: Optional[str] = None) -> str:
    """Run one job to its end; returns its final status. Safe to call twice for the same job."""
    with database.session() as db:
        job = db.get(Job, job_id)
        if job is None:
            log.warning("job %s does not exist; dropping the task", job_id)
            return "missing"
        if job.status in TERMINAL:
            return job.status
        if _alive_elsewhere(job, settings):
            log.info("job %s is running on %s; ignoring a duplicate delivery", job_id, job.worker)
            return "duplicate"
        attempts = job.attempts + 1
        if attempts > settings.job_max_attempts:
            remove_staging(settings, job_id)  # the last killed attempt's
            finish(db, job_id, "failed", code="too_many_attempts",
                   error=f"gave up after {settings.job_max_attempts} attempts (the worker died each time)")
            return "failed"
        if not transition(db, job_id, ACTIVE, status="running", stage="importing", progress=0.0, attempts=attempts,
                          started_at=utcnow(), heartbeat_at=utcnow(), worker=worker or socket.gethostname(),
                          error=None, error_code=None):
            return "cancelled"
        try:
            with Heartbeat(database, job_id, attempts, settings.heartbeat_s):
                _compile(settings, job, db, attempts)
            if not finish(db, job_id, "succeeded", attempt=attempts):
                return _after_lost_race(db, settings, job_id)
            return "succeeded"
        except JobCancelled:
            return _after_lost_race(db, settings, job_id)
        except (SoftTimeLimitExceeded, SandboxTimeout):
            finish(db, job_id, "failed", code="time_limit", attempt=attempts,
                   error=f"the compile took longer than the limit of {settings.job_soft_time_limit_s} s")
            return "failed"
        except KilnError as err:  # the user's model, or the sandbox: a crash, a limit, a full disk
            finish(db, job_id, "failed", error=message_for_users(err), code=err.code, attempt=attempts)
            return "failed"
        except Exception as err:  # a compiler bug: tell the user what happened, keep the traceback in the log
            log.exception("job %s failed", job_id)
            finish(db, job_id, "failed", code="internal_error", error=f"internal error: {type(err).__name__}: {err}",
                   attempt=attempts)
            return "failed"
