"""GPU (cuda) jobs: routed to the `gpu` queue that workers with an NVIDIA GPU consume; on a machine
without a GPU the job still succeeds, its report saying why run-validation was skipped."""
from __future__ import annotations

import pytest

from core.backends.cuda import CudaBackend
from tests.backend_calls import runs_on_host
from core.target import get_target
from service.core import queues
from workers.compile_job import run_compile_job
from core.backends import resolve
from service.core.queues import COMPILE_QUEUE, GPU_QUEUE, default_queues, job_queue


def test_cuda_jobs_go_to_the_gpu_queue_tuned_or_not():
    assert job_queue(*resolve("cuda"), 0) == GPU_QUEUE == "gpu"
    assert job_queue(*resolve("cuda -arch=sm_90"), 50) == GPU_QUEUE
    assert job_queue(*resolve("native"), 0) == COMPILE_QUEUE and job_queue(*resolve("x86-64-v4"), 1) == "measure.x86-64-v4"


def test_a_worker_consumes_the_gpu_queue_where_a_gpu_is(monkeypatch):
    monkeypatch.setattr(CudaBackend, "has_device", lambda self, target: False)
    assert GPU_QUEUE not in default_queues() and "cuda" not in queues.host_device_kinds()
    assert default_queues(with_gpu=True)[-1] == GPU_QUEUE  # `kiln serve`'s embedded worker: builds GPU jobs anyway
    monkeypatch.setattr(CudaBackend, "has_device", lambda self, target: True)
    assert "cuda" in queues.host_device_kinds()
    assert default_queues().count(GPU_QUEUE) == 1 and default_queues(with_gpu=True).count(GPU_QUEUE) == 1


class _FakeCelery:
    def __init__(self):
        self.sent = []

    def send_task(self, name, args, queue, task_id):
        self.sent.append((name, args, queue))


def test_the_service_enqueues_cuda_jobs_on_the_gpu_queue(api, make_model, monkeypatch):
    import service.core.celery
    from service.api.enqueue import celery_enqueue

    fake = _FakeCelery()
    monkeypatch.setattr(service.core.celery, "create_celery", lambda settings: fake)
    headers = api.auth()
    model = api.upload(headers, make_model()).json()
    jobs = [api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"], "target": target}).json()
            for target in ("cuda -arch=sm_90", "native")]
    enqueue = celery_enqueue(api.settings, api.app.state.db)
    for job in jobs:
        enqueue(job["id"])
    assert [queue for _, _, queue in fake.sent] == [GPU_QUEUE, COMPILE_QUEUE]


@pytest.mark.skipif(runs_on_host(get_target("cuda")), reason="this machine has a GPU: the job would run validation")
def test_a_cuda_job_without_a_gpu_succeeds_and_says_validation_was_skipped(api, make_model):
    headers = api.auth()
    model = api.upload(headers, make_model()).json()
    job = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"], "target": "cuda"}).json()
    run_compile_job(job["id"], api.settings, api.app.state.db, worker="test")
    status = api.client.get(f"/api/v1/jobs/{job['id']}", headers=headers).json()
    assert status["status"] == "succeeded", status
    report = api.client.get(f"/api/v1/jobs/{job['id']}/report", headers=headers).json()
    assert "no NVIDIA GPU on this machine" in report["validation"]["skipped"]
    assert report["device"] == {"kind": "cuda", "arch": "sm_80", "ptxas_checked": report["device"]["ptxas_checked"],
                                "ran": False}
    assert report["kernels"] and all(k["time_ms"] is None for k in report["kernels"])  # listed, never timed


def test_the_targets_api_says_whether_cuda_runs_on_this_server(api, monkeypatch):
    for present in (False, True):
        monkeypatch.setattr(CudaBackend, "has_device", lambda self, target: present)
        listed = {t["name"]: t for t in api.client.get("/api/v1/targets", headers=api.auth()).json()}
        assert listed["cuda"]["kind"] == "cuda" and listed["cuda"]["runs_on_host"] is present
        assert listed["native"]["runs_on_host"] is True
