"""Remote measurement on real Celery workers and Redis: a tuning job for rpi5 compiles on the service's worker and
sends its candidates to two `kiln worker --measure rpi5` processes (qemu-aarch64 here). One is SIGKILLed in the
middle of a batch: the batch is re-sent, every candidate is recorded once, and the job's artifact matches ONNX
Runtime under emulation. Measuring workers that all vanish fail a queued job with a clear message."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import httpx
import numpy as np
import pytest

from core.backends import get_backend
from core.driver.validate import onnxruntime_session
from core.runtime.emulated import EMULATED
from core.target import get_target
from service.core.worker_beats import workers_seen
from tests.conftest import ROOT, tiny_model, wait_until

pytestmark = pytest.mark.slow

BATCH_TIMEOUT_S = 20  # how long the compile waits for a batch before sending it again (production: 300)


def measuring_worker(service, env: dict, name: str) -> subprocess.Popen:
    """`kiln worker --measure rpi5` in its own process group (a SIGKILL to the group takes its pool and qemu)."""
    log = open(service.data_dir.parent / f"{name}.log", "w")
    return subprocess.Popen([sys.executable, "-m", "cli.main", "worker", "--measure", "rpi5", "--data-dir",
                             str(service.data_dir), "--log-level", "info"], stdout=log, stderr=subprocess.STDOUT,
                            cwd=ROOT, env={**os.environ, **env}, start_new_session=True)


def kill_group(worker: subprocess.Popen) -> None:
    if worker.poll() is None:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)


def emulating(worker: subprocess.Popen) -> bool:
    """Whether a qemu process of this worker's group runs now: the worker is in the middle of a batch."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended while we looked
            continue
        comm, fields = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
        if comm.startswith("qemu") and int(fields[2]) == worker.pid:
            return True
    return False


def serving_rpi5(data_dir: Path) -> int:
    return sum("measure.rpi5" in w["queues"] for w in workers_seen(data_dir))


@pytest.fixture
def redis_env(redis_url) -> dict:
    url = redis_url.rsplit("/", 1)[0] + "/5"  # a database of its own: no other test's queues or results
    return {"KILN_BROKER_URL": url, "KILN_RESULT_BACKEND": url, "KILN_MEASURE_BATCH_TIMEOUT_S": str(BATCH_TIMEOUT_S)}


@pytest.fixture
def workers():
    started: list[subprocess.Popen] = []
    yield started
    for worker in started:
        kill_group(worker)


def submit(client: httpx.Client, model: bytes, trials: int) -> dict:
    uploaded = client.post("/api/v1/models", files={"file": ("tiny.onnx", model)})
    assert uploaded.status_code == 201, uploaded.text
    job = client.post("/api/v1/jobs", json={"model_id": uploaded.json()["id"], "target": "rpi5",
                                            "tuning": {"trials": trials}})
    assert job.status_code == 201, job.text
    return job.json()


def test_two_emulated_measuring_workers_one_killed_mid_batch(start_kiln, redis_env, workers, wait_for_job, ended,
                                                             tmp_path):
    service = start_kiln(redis_env)
    workers += [measuring_worker(service, redis_env, f"measure-{k}") for k in range(2)]
    wait_until(lambda: serving_rpi5(service.data_dir) == 2, 90, "two workers announcing measure.rpi5")
    model = tiny_model(seed=4)
    with httpx.Client(base_url=service.url, headers=service.headers, timeout=60) as client:
        job = submit(client, model, trials=16)
        killed = []

        def kill_one_mid_batch() -> bool:
            for worker in workers:
                if emulating(worker):
                    kill_group(worker)
                    killed.append(worker)
                    return True
            return False

        wait_until(kill_one_mid_batch, 240, "a measuring worker running a candidate under qemu")
        final = wait_for_job(client, job["id"], ended, timeout_s=600)
        assert final["status"] == "succeeded", (final["error"], final["error_code"])
        report = client.get(final["links"]["report"]).json()
        artifact = client.get(final["links"]["artifact"])
    assert [w for w in workers if w.poll() is None] and killed[0].poll() is not None

    measured = report["tuning"]["measurement"]
    assert measured["kind"] == "rpi5" and measured["emulated"] and EMULATED in measured["note"]
    assert measured["resent"] >= 1 and measured["lost"] == 0, measured  # the killed batch, answered by the other
    assert report["tuning"]["trials"] == measured["candidates"] == 16
    records = [json.loads(line) for line in (service.data_dir / "tuning-records.jsonl").read_text().splitlines()]
    records = [r for r in records if r["target"] == "rpi5"]
    measured_configs = [(r["workload"], json.dumps(r["config"], sort_keys=True)) for r in records]
    assert len(measured_configs) == len(set(measured_configs)) == 16  # each candidate recorded exactly once
    assert sum(r["error"] == 0 for r in records) >= 1

    assert report["validation"]["passed"] and report["validation"]["mode"] == EMULATED
    (tmp_path / "art.tar.gz").write_bytes(artifact.content)
    with tarfile.open(tmp_path / "art.tar.gz") as tar:
        tar.extractall(tmp_path / "art", filter="data")
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    target = get_target("rpi5")
    with get_backend(target).emulator(target).load(tmp_path / "art") as module:
        got = module.run({"x": x})["y"]
    want = onnxruntime_session(model, 1).run(["y"], {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_queued_job_whose_measuring_workers_vanish_fails_clearly(start_kiln, redis_env, workers, wait_for_job,
                                                                   ended):
    env = {**redis_env, "KILN_MEASURE_BATCH_TIMEOUT_S": "3"}
    service = start_kiln(env)
    workers.append(measuring_worker(service, env, "measure-gone"))
    wait_until(lambda: serving_rpi5(service.data_dir) == 1, 90, "a worker announcing measure.rpi5")
    kill_group(workers[0])  # its last beat still counts for a while: the job is accepted, then nobody measures
    with httpx.Client(base_url=service.url, headers=service.headers, timeout=60) as client:
        job = submit(client, tiny_model(seed=5), trials=4)
        final = wait_for_job(client, job["id"], ended, timeout_s=300)
    assert final["status"] == "failed" and final["error_code"] == "measuring_devices_lost", final
    assert "no device measuring rpi5 code answered (Celery queue measure.rpi5)" in final["error"]
    assert "workers are gone" in final["error"]
