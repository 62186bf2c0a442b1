"""A job with a tuning budget tunes (stage `tuning k/N`), records go to the server's shared database,
and the next job for the same workloads measures nothing. Tuning jobs go to their device kind's queue."""
from __future__ import annotations

import json

from service.core import storage
from workers import compile_job
from workers.compile_job import run_compile_job
from core.target import host_target
from core.backends import resolve
from service.core.queues import (COMPILE_QUEUE, announced_measure_kinds, host_device_kinds, job_queue,
                                 measured_remotely)


def _tuned_job(api, headers, model_id, trials):
    response = api.client.post("/api/v1/jobs", headers=headers,
                               json={"model_id": model_id, "tuning": {"trials": trials, "time_budget_s": 120}})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def test_tuning_job_reports_progress_and_shares_records(api, make_model, monkeypatch):
    stages: list[str] = []
    real_writer = compile_job._progress_writer

    def recording_writer(db, job_id, **kwargs):
        report = real_writer(db, job_id, **kwargs)

        def wrapped(stage, fraction, detail=""):
            stages.append(detail or stage.label)
            report(stage, fraction, detail)
        return wrapped

    monkeypatch.setattr(compile_job, "_progress_writer", recording_writer)
    headers = api.auth()
    model = api.upload(headers, make_model()).json()
    first = _tuned_job(api, headers, model["id"], trials=6)
    assert run_compile_job(first, api.settings, api.app.state.db) == "succeeded"
    tuning = json.loads((storage.job_dir(api.settings, first) / storage.REPORT_JSON).read_text())["tuning"]
    assert tuning["trials"] > 0 and tuning["tasks"]
    assert any(s.startswith("tuning ") and s.split(" ")[1].split("/")[1] == str(tuning["trials"]) for s in stages), stages
    assert api.settings.records.is_file() and api.settings.records.stat().st_size > 0

    second = _tuned_job(api, headers, model["id"], trials=6)
    assert run_compile_job(second, api.settings, api.app.state.db) == "succeeded"
    again = json.loads((storage.job_dir(api.settings, second) / storage.REPORT_JSON).read_text())["tuning"]
    assert again["trials"] == 0 and again["cache_hits"] == len(again["tasks"]) >= 1


def test_tuning_jobs_are_routed_to_their_device_kind():
    assert job_queue(*resolve("native"), 0) == COMPILE_QUEUE
    assert job_queue(*resolve("x86-64-v4"), 0) == COMPILE_QUEUE
    assert job_queue(*resolve("x86-64-v4"), 100) == "measure.x86-64-v4"
    assert job_queue(*resolve("native"), 10) == f"measure.{host_device_kinds()[-1]}"
    # Another CPU family compiles on any worker and sends only its measurements to measure.<kind>.
    foreign = host_target().arch != "aarch64"
    assert job_queue(*resolve("rpi5"), 8) == (COMPILE_QUEUE if foreign else "measure.rpi5")
    assert measured_remotely(*resolve("rpi5"), 8) is foreign and not measured_remotely(*resolve("rpi5"), 0)
    assert not measured_remotely(*resolve("cuda"), 8) and not measured_remotely(*resolve(host_target().name), 8)


def test_measuring_workers_announce_their_kinds_in_their_beats():
    beats = [{"name": "a", "queues": ["compile", "measure.x86-64-v3"]}, {"name": "b", "queues": ["measure.rpi5"]},
             {"name": "c", "queues": ["measure.rpi5", "gpu"]}]
    assert announced_measure_kinds(beats) == ["rpi5", "x86-64-v3"]


def _record_lines(api) -> int:
    path = api.settings.records
    return len(path.read_text().splitlines()) if path.is_file() else 0


def test_nothing_is_recorded_for_a_job_after_its_cancel_was_answered(api, make_model, monkeypatch):
    """The child appended each measured batch to the shared records itself: a cancel answered while a batch was
    being measured still got that batch's records (8 after "cancelled")."""
    headers = api.auth()
    model = api.upload(headers, make_model()).json()
    job_id = _tuned_job(api, headers, model["id"], trials=400)
    batches: list[str] = []
    at_answer: list[int] = []
    real_tuning_writer, real_progress_writer = compile_job._tuning_writer, compile_job._progress_writer

    def counting_tuning_writer(*args):
        report = real_tuning_writer(*args)

        def wrapped(kind, status):
            report(kind, status)
            batches.append(kind)
        return wrapped

    def cancelling_progress_writer(*args, **kwargs):
        report = real_progress_writer(*args, **kwargs)

        def wrapped(stage, fraction, detail=""):
            report(stage, fraction, detail)
            if "tuning" in batches and not at_answer:  # the next batch is being measured now: cancel
                answer = api.client.delete(f"/api/v1/jobs/{job_id}", headers=headers)
                assert answer.status_code == 200 and answer.json()["status"] == "cancelled", answer.text
                at_answer.append(_record_lines(api))
        return wrapped

    monkeypatch.setattr(compile_job, "_tuning_writer", counting_tuning_writer)
    monkeypatch.setattr(compile_job, "_progress_writer", cancelling_progress_writer)
    assert run_compile_job(job_id, api.settings, api.app.state.db) == "cancelled"
    assert at_answer and at_answer[0] > 0  # the batch measured before the cancel was published
    assert _record_lines(api) == at_answer[0]
    assert not list(api.settings.tmp_dir.iterdir())  # the staged records went with the staging folder
