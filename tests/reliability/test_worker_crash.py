"""A worker killed with SIGKILL in the middle of a compile: the job is queued again and completes exactly once."""
from __future__ import annotations

import os
import signal

import httpx
import pytest

pytestmark = pytest.mark.slow




def test_sigkill_during_compile_requeues_and_completes_once(start_kiln, models_dir, fast_sweep, wait_for_job, ended):
    service = start_kiln(fast_sweep)
    with httpx.Client(base_url=service.url, headers=service.headers, timeout=60) as client:
        with open(models_dir / "squeezenet1_1.onnx", "rb") as f:
            model = client.post("/api/v1/models", files={"file": ("squeezenet1_1.onnx", f)}).json()
        job = client.post("/api/v1/jobs", json={"model_id": model["id"]}).json()
        running = wait_for_job(client, job["id"], lambda j: j["stage"] in ("optimizing", "building"))
        pid = int(running["worker"].rsplit("pid ", 1)[1])
        os.kill(pid, signal.SIGKILL)

        final = wait_for_job(client, job["id"], ended)
        assert final["status"] == "succeeded", final
        assert final["attempts"] == 2
        assert int(final["worker"].rsplit("pid ", 1)[1]) != pid
        artifact = client.get(final["links"]["artifact"])
        assert artifact.status_code == 200 and len(artifact.content) > 1_000_000
    outputs = sorted(p.name for p in (service.data_dir / "jobs" / job["id"]).iterdir())
    assert outputs == ["artifact.tar.gz", "report.html", "report.json"]  # one artifact, no temporary leftovers
