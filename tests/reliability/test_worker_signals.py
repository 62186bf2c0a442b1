"""Real worker processes: SIGTERM (warm shutdown) and a task delivered twice over Redis never lose or
duplicate a job: it ends finished (or queued again), with exactly one artifact."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import httpx
import pytest

from service.core.settings import Settings
from service.core.celery import create_celery
from service.core.queues import COMPILE_QUEUE

pytestmark = pytest.mark.slow




def _submit(client, data: bytes) -> dict:
    model = client.post("/api/v1/models", files={"file": ("m.onnx", data)})
    assert model.status_code == 201, model.text
    return client.post("/api/v1/jobs", json={"model_id": model.json()["id"]}).json()


def _outputs(service, job_id) -> list[str]:
    return sorted(p.name for p in (service.data_dir / "jobs" / job_id).iterdir())


def test_sigterm_to_the_worker_finishes_the_running_job_first(start_kiln, make_model, fast_sweep, wait_for_job, ended):
    service = start_kiln(fast_sweep)
    with httpx.Client(base_url=service.url, headers=service.headers, timeout=60) as client:
        job = _submit(client, make_model())
        running = wait_for_job(client, job["id"], lambda j: j["status"] == "running")
        main_pid = int(re.search(r"kiln-(\d+)@", running["worker"]).group(1))
        os.kill(main_pid, signal.SIGTERM)  # Celery's warm shutdown: stop taking jobs, finish the one running
        final = wait_for_job(client, job["id"], ended)
        assert (final["status"], final["attempts"]) == ("succeeded", 1), final
        assert client.get(final["links"]["artifact"]).status_code == 200
    assert _outputs(service, job["id"]) == ["artifact.tar.gz", "report.html", "report.json"]
    assert list((service.data_dir / "tmp").iterdir()) == []


def test_sigterm_to_the_pool_process_queues_the_job_again(start_kiln, make_model, fast_sweep, wait_for_job, ended):
    service = start_kiln(fast_sweep)
    with httpx.Client(base_url=service.url, headers=service.headers, timeout=60) as client:
        job = _submit(client, make_model(seed=1))
        running = wait_for_job(client, job["id"], lambda j: j["status"] == "running")
        pool_pid = int(running["worker"].rsplit("pid ", 1)[1])
        os.kill(pool_pid, signal.SIGTERM)  # the process running the compile goes away mid-job
        final = wait_for_job(client, job["id"], ended)
        assert final["status"] == "succeeded", final
        assert final["attempts"] in (1, 2)  # finished before the signal landed, or redelivered and run again
    assert _outputs(service, job["id"]) == ["artifact.tar.gz", "report.html", "report.json"]
    assert list((service.data_dir / "tmp").iterdir()) == []


def test_task_delivered_twice_over_redis_makes_one_artifact(redis_url, start_kiln, make_model, wait_for_job, ended):
    service = start_kiln({"KILN_BROKER_URL": redis_url, "KILN_RESULT_BACKEND": redis_url})
    celery = create_celery(Settings(data_dir=service.data_dir, broker_url=redis_url, result_backend=redis_url))
    with httpx.Client(base_url=service.url, headers=service.headers, timeout=60) as client:
        job = _submit(client, make_model(seed=2))
        # The broker hands the same job over again (a redelivery after a lost ack, or a retried publish).
        for copy in range(2):
            celery.send_task("kiln.compile", args=[job["id"]], queue=COMPILE_QUEUE, task_id=f"dup-{copy}-{job['id']}")
        final = wait_for_job(client, job["id"], ended)
        assert (final["status"], final["attempts"]) == ("succeeded", 1), final
        results = [celery.AsyncResult(f"dup-{copy}-{job['id']}").get(timeout=120) for copy in range(2)]
        assert sorted(results) in (["succeeded", "succeeded"], ["duplicate", "succeeded"])
        assert client.get(f"/api/v1/jobs/{job['id']}").json()["finished_at"] == final["finished_at"]
    assert _outputs(service, job["id"]) == ["artifact.tar.gz", "report.html", "report.json"]


def test_ctrl_c_of_kiln_serve_queues_the_running_job_again_at_once(start_kiln, make_model, fast_sweep, wait_for_job,
                                                                   ended):
    """Ctrl+C of `make serve` ended every process but left the job `running` until the next start's sweeper."""
    from service.core.db import Database
    from service.core.tables import Job
    from tests.conftest import ROOT, free_port, wait_until

    env = {**fast_sweep, "KILN_SHUTDOWN_GRACE_S": "1"}
    service = start_kiln(env)
    with httpx.Client(base_url=service.url, headers=service.headers, timeout=60) as client:
        model = client.post("/api/v1/models", files={"file": ("m.onnx", make_model(seed=2))}).json()
        job = client.post("/api/v1/jobs", json={"model_id": model["id"],
                                                "tuning": {"trials": 4000, "time_budget_s": 20}}).json()
        running = wait_for_job(client, job["id"], lambda j: j["status"] == "running")
    # What a terminal's Ctrl+C does: SIGINT to serve and to the worker (once in serve's process group).
    service.process.send_signal(signal.SIGINT)
    os.kill(int(re.search(r"kiln-(\d+)@", running["worker"]).group(1)), signal.SIGINT)
    assert service.process.wait(timeout=90) == 0
    database = Database(Settings(data_dir=service.data_dir).database)
    with database.session() as db:
        row = db.get(Job, job["id"])
        assert (row.status, row.worker) == ("queued", None), (row.status, row.stage, row.worker)
    database.dispose()

    port = free_port()  # the queued job is in the broker: the next start runs it
    again = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--port", str(port), "--data-dir",
                              str(service.data_dir), "--log-level", "warning"], cwd=ROOT, env={**os.environ, **env},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=service.headers, timeout=60) as client:
            wait_until(lambda: _answers(client), 60, "kiln serve answering again")
            final = wait_for_job(client, job["id"], ended)
        assert final["status"] == "succeeded" and final["attempts"] == 2, final
    finally:
        again.send_signal(signal.SIGINT)
        again.wait(timeout=60)


def _answers(client) -> bool:
    try:
        return client.get("/api/v1/health").status_code == 200
    except httpx.HTTPError:
        return False
