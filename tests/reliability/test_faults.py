"""Faults inside a compile: generated code that crashes or hangs, a full disk, a memory hog. Each fails
only its job, with a clear message and no partial output; the worker (this test process) carries on."""
from __future__ import annotations

import errno
import os
import signal
import tarfile
import time

import pytest

from core.driver import pipeline
from service.core import storage
from service.core.tables import Job
from workers import compile_child
from workers.compile_job import run_compile_job


@pytest.fixture
def job(api, make_model):
    headers = api.auth()
    model = api.upload(headers, make_model()).json()

    def new_job() -> str:
        return api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"]}).json()["id"]
    return new_job


def _run(api, job_id) -> Job:
    run_compile_job(job_id, api.settings, api.app.state.db, worker="test")
    with api.app.state.db.session() as db:
        return db.get(Job, job_id)


def assert_no_outputs(api, job_id) -> None:
    folder = storage.job_dir(api.settings, job_id)
    assert not folder.exists() or list(folder.iterdir()) == [], "a partial output was left"
    assert list(api.settings.tmp_dir.iterdir()) == [], "the staging folder was left"


def _crash(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGSEGV)


def test_generated_code_segfault_during_validation_fails_only_the_job(api, job, monkeypatch):
    monkeypatch.setattr(pipeline, "validate_against_ort", _crash)  # stands in for a kernel that segfaults
    crashed = _run(api, job())
    assert (crashed.status, crashed.error_code) == ("failed", "sandbox_failed")
    assert crashed.error == "the compile crashed with SIGSEGV while validating"
    assert_no_outputs(api, crashed.id)
    monkeypatch.undo()
    assert _run(api, job()).status == "succeeded"  # the same worker goes on with the next job


def test_hanging_kernel_is_stopped_by_the_time_limit(api, job, monkeypatch):
    monkeypatch.setattr(pipeline, "compare_latency", lambda *a, **k: time.sleep(600))  # a benchmark that never ends
    monkeypatch.setattr(api.settings, "job_soft_time_limit_s", 6)
    started = time.monotonic()
    hung = _run(api, job())
    assert time.monotonic() - started < 30
    assert (hung.status, hung.error_code) == ("failed", "time_limit")
    assert "longer than the limit of 6 s" in hung.error
    assert_no_outputs(api, hung.id)


def test_disk_full_while_writing_the_artifact_fails_cleanly(api, job, monkeypatch):
    real = storage.write_atomic

    def full_disk(path, data):
        if path.name == storage.REPORT_HTML:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, data)

    monkeypatch.setattr(storage, "write_atomic", full_disk)
    failed = _run(api, job())
    assert (failed.status, failed.error_code) == ("failed", "storage_full"), failed.error
    assert "No space left on device" in failed.error
    assert_no_outputs(api, failed.id)
    assert api.client.get(f"/api/v1/jobs/{failed.id}/artifact", headers=api.auth()).status_code in (404, 409)


def test_file_size_limit_fails_the_job_not_the_worker(api, job, monkeypatch):
    monkeypatch.setattr(api.settings, "job_file_limit_bytes", 4096)  # the library and the artifact are larger
    failed = _run(api, job())
    assert (failed.status, failed.error_code) == ("failed", "storage_full"), failed.error
    assert "File too large" in failed.error
    assert_no_outputs(api, failed.id)


def test_memory_hog_hits_the_memory_limit(api, job, monkeypatch):
    def hog(*args, **kwargs):
        return bytearray(8 << 30)

    monkeypatch.setattr(pipeline, "build_executable", hog)
    # 6 GiB of address space: the 8 GiB hog cannot fit, while the stages before it keep their room (under 4 GiB the
    # tuning stage's threads once failed to start: a SystemError, not the hog's MemoryError)
    monkeypatch.setattr(api.settings, "job_memory_limit_bytes", 6 << 30)
    failed = _run(api, job())
    assert (failed.status, failed.error_code) == ("failed", "out_of_memory"), failed.error
    assert "ran out of memory (limit 6,442,450,944 bytes) while building" in failed.error
    assert_no_outputs(api, failed.id)


def test_publish_failure_removes_what_was_moved(tmp_path, monkeypatch):
    staging, job_folder = tmp_path / "staging", tmp_path / "job"
    (staging / "out").mkdir(parents=True)
    for name in compile_child.OUTPUTS[:-1]:  # the artifact itself is missing
        (staging / "out" / name).write_text("x")
    with pytest.raises(OSError):
        compile_child.publish(staging, job_folder)
    assert list(job_folder.iterdir()) == []


def test_killed_attempt_leaves_no_staging_for_the_next(api, job):
    job_id = job()
    leftover = compile_child.staging_dir(api.settings, job_id)
    (leftover / "out").mkdir(parents=True)  # as a worker killed mid-compile would leave it
    (leftover / "out" / storage.ARTIFACT).write_bytes(b"half")
    assert _run(api, job_id).status == "succeeded"
    assert not leftover.exists()
    outputs = sorted(p.name for p in storage.job_dir(api.settings, job_id).iterdir())
    assert outputs == ["artifact.tar.gz", "report.html", "report.json"]


def test_artifact_has_fixed_names_and_regular_files_only(api, job):
    job_id = job()
    assert _run(api, job_id).status == "succeeded"
    with tarfile.open(storage.job_dir(api.settings, job_id) / storage.ARTIFACT) as tar:
        members = tar.getmembers()
        assert all(m.isreg() and "/" not in m.name and not m.name.startswith(".") for m in members)
        assert {m.name for m in members} == {"libkiln_model.so", "kiln_model.h", "weights.bin", "metadata.json",
                                             "kiln_loader.py", "report.json", "report.html", "README.txt", "main.c",
                                             "Makefile"}
        for member in members:
            tarfile.data_filter(member, "/extract/here")  # raises for links, devices, absolute or escaping names
