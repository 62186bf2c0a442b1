"""The compile job function the Celery task runs: idempotent, cancellable, clear failures, bounded retries."""
from __future__ import annotations

from datetime import timedelta

import pytest

from core.driver.stages import Stage
from service.core import storage
from service.core.job_state import transition
from service.api.sweeper import requeue_stale_jobs
from service.core.tables import Job, utcnow
from workers import compile_job
from workers.compile_job import JobCancelled, run_compile_job


@pytest.fixture
def queued_job(api, make_model):
    headers = api.auth()
    model = api.upload(headers, make_model()).json()
    job = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"]}).json()
    return job["id"]


def _job(api, job_id) -> Job:
    with api.app.state.db.session() as db:
        return db.get(Job, job_id)


def _run(api, job_id):
    return run_compile_job(job_id, api.settings, api.app.state.db, worker="test")


def test_second_delivery_of_a_finished_job_does_nothing(api, queued_job):
    assert _run(api, queued_job) == "succeeded"
    first = _job(api, queued_job)
    artifact = storage.job_dir(api.settings, queued_job) / storage.ARTIFACT
    stamp = artifact.stat().st_mtime_ns
    assert _run(api, queued_job) == "succeeded"
    again = _job(api, queued_job)
    assert again.attempts == first.attempts == 1 and again.finished_at == first.finished_at
    assert artifact.stat().st_mtime_ns == stamp
    assert not any(p.name.startswith(".") for p in artifact.parent.iterdir())  # no temporary files left


def test_redelivered_running_job_starts_over(api, queued_job):
    with api.app.state.db.session() as db:  # as if a worker died mid-compile
        transition(db, queued_job, ("queued",), status="running", stage="building", attempts=1)
    assert _run(api, queued_job) == "succeeded"
    assert _job(api, queued_job).attempts == 2


def test_poison_job_stops_after_max_attempts(api, queued_job):
    with api.app.state.db.session() as db:
        transition(db, queued_job, ("queued",), status="running", attempts=api.settings.job_max_attempts)
    assert _run(api, queued_job) == "failed"
    job = _job(api, queued_job)
    assert job.error_code == "too_many_attempts" and "gave up after 3 attempts" in job.error


def test_missing_job_is_dropped(api):
    assert _run(api, "0" * 32) == "missing"


def test_cancel_while_running_stops_the_compile(api, queued_job, monkeypatch):
    real_writer = compile_job._progress_writer

    def cancelling_writer(db, job_id, **kwargs):
        report = real_writer(db, job_id, **kwargs)

        def wrapped(stage, fraction, detail=""):
            if stage is Stage.BUILD:  # the user presses cancel while the job is building
                api.client.delete(f"/api/v1/jobs/{job_id}", headers=api.auth("alice"))
            report(stage, fraction, detail)
        return wrapped

    monkeypatch.setattr(compile_job, "_progress_writer", cancelling_writer)
    assert _run(api, queued_job) == "cancelled"
    job = _job(api, queued_job)
    assert (job.status, job.stage) == ("cancelled", "cancelled")
    assert not storage.job_dir(api.settings, queued_job).exists()


def test_progress_writer_raises_once_cancelled(api, queued_job):
    with api.app.state.db.session() as db:
        transition(db, queued_job, ("queued",), status="running")
        report = compile_job._progress_writer(db, queued_job, min_interval_s=0)
        report(Stage.OPTIMIZE, 0.1)
        assert _job(api, queued_job).stage == "optimizing"
        transition(db, queued_job, ("running",), status="cancelled")
        with pytest.raises(JobCancelled):
            report(Stage.BUILD, 0.2)


def test_bad_model_fails_with_the_compilers_message(api, queued_job):
    path = storage.model_path(api.settings, _job(api, queued_job).model_id)
    path.write_bytes(b"corrupted on disk")
    assert _run(api, queued_job) == "failed"
    job = _job(api, queued_job)
    assert job.error_code == "invalid_model" and job.error.startswith("not an ONNX model")
    assert job.stage == "failed" and job.finished_at is not None


def test_duplicate_delivery_while_alive_is_ignored(api, queued_job):
    with api.app.state.db.session() as db:
        transition(db, queued_job, ("queued",), status="running", attempts=1, heartbeat_at=utcnow(), worker="other")
    assert _run(api, queued_job) == "duplicate"
    assert _job(api, queued_job).attempts == 1


def test_sweeper_requeues_only_jobs_whose_worker_went_silent(api, make_model):
    headers = api.auth()
    model = api.upload(headers, make_model()).json()
    jobs = [api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"]}).json()["id"]
            for _ in range(3)]
    silent, alive, done = jobs
    old = utcnow() - timedelta(seconds=api.settings.stale_after_s + 5)
    with api.app.state.db.session() as db:
        transition(db, silent, ("queued",), status="running", attempts=1, heartbeat_at=old)
        transition(db, alive, ("queued",), status="running", attempts=1, heartbeat_at=utcnow())
        transition(db, done, ("queued",), status="succeeded", heartbeat_at=old)
    api.queued.clear()
    assert requeue_stale_jobs(api.app.state.db, api.settings, api.queued.append) == [silent]
    assert api.queued == [silent]
    assert (_job(api, silent).status, _job(api, alive).status, _job(api, done).status) == ("queued", "running", "succeeded")
    assert _run(api, silent) == "succeeded" and _job(api, silent).attempts == 2


def test_an_attempt_taken_over_by_another_worker_neither_ends_the_job_nor_touches_its_files(api, queued_job,
                                                                                          monkeypatch):
    """A worker cut off mid-job is replaced (the sweeper queues the job, another worker claims attempt 2); when the
    first one comes back, none of its writes lands: not its status, not its outputs, not its staging cleanup."""
    real = compile_job.run_sandboxed

    def taken_over_meanwhile(*args, **kwargs):
        with api.app.state.db.session() as db:
            transition(db, queued_job, ("running",), attempts=2, worker="other", heartbeat_at=utcnow())
        staging = compile_job.staging_dir(api.settings, queued_job)  # shared by both attempts' workers
        staging.mkdir(parents=True, exist_ok=True)
        (staging / "attempt-2-was-here").write_text("")
        return real(*args, **kwargs)  # its first progress write finds the job taken over: JobCancelled

    monkeypatch.setattr(compile_job, "run_sandboxed", taken_over_meanwhile)
    assert _run(api, queued_job) == "running"  # the job is attempt 2's now
    job = _job(api, queued_job)
    assert (job.status, job.attempts, job.worker, job.finished_at) == ("running", 2, "other", None)
    assert not (storage.job_dir(api.settings, queued_job) / storage.ARTIFACT).exists()
    assert (compile_job.staging_dir(api.settings, queued_job) / "attempt-2-was-here").exists()
