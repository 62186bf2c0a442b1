"""End to end over real HTTP: `kiln serve` with its Celery worker process (SQLite broker, then Redis),
and the `kiln submit` CI client. The downloaded artifact must match ONNX Runtime."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest

from tests.conftest import assert_artifact_matches_onnxruntime


pytestmark = pytest.mark.slow

STAGE_ORDER = ["queued", "importing", "optimizing", "tuning", "building", "validating", "benchmarking", "packaging",
               "succeeded"]


def _follow_events(client: httpx.Client, job_id: str) -> list[dict]:
    """Every progress event of the job, read from its Server-Sent Events stream until it ends."""
    states, event = [], None
    with client.stream("GET", f"/api/v1/jobs/{job_id}/events", timeout=300) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event == "progress":
                states.append(json.loads(line[5:]))
            elif event == "end":
                break
    return states


def _compile_over_http(service, model_path, tmp_path) -> dict:
    started = time.perf_counter()
    with httpx.Client(base_url=service.url, headers=service.headers, timeout=120) as client:
        with open(model_path, "rb") as f:
            uploaded = client.post("/api/v1/models", files={"file": (model_path.name, f)})
        assert uploaded.status_code in (200, 201), uploaded.text
        job = client.post("/api/v1/jobs", json={"model_id": uploaded.json()["id"], "target": "native"}).json()
        assert job["status"] == "queued"
        states = _follow_events(client, job["id"])
        final = states[-1]
        assert final["status"] == "succeeded", final
        # The stream polls the job, so a stage shorter than a poll may be skipped, never reordered.
        stages = [s["stage"] for s in states]
        positions = [STAGE_ORDER.index(stage.split(" ")[0]) for stage in stages]
        assert positions == sorted(positions) and stages[-1] == "succeeded" and "building" in stages, stages
        progress = [s["progress"] for s in states]
        assert progress == sorted(progress)
        artifact = tmp_path / "squeezenet.tar.gz"
        artifact.write_bytes(client.get(final["links"]["artifact"]).content)
        report = client.get(final["links"]["report"]).json()
    elapsed = time.perf_counter() - started
    print(f"\nupload -> artifact: {elapsed:.1f} s (compile {report['timings_s']['total']:.1f} s)")
    assert_artifact_matches_onnxruntime(artifact, model_path)
    assert report["validation"]["max_abs_err"] < 1e-4
    return report


def test_squeezenet_end_to_end_with_sqlite_broker(live_service, models_dir, tmp_path):
    _compile_over_http(live_service, models_dir / "squeezenet1_1.onnx", tmp_path)


def test_squeezenet_end_to_end_with_redis_broker(redis_url, start_kiln, models_dir, tmp_path):
    service = start_kiln({"KILN_BROKER_URL": redis_url, "KILN_RESULT_BACKEND": redis_url})
    _compile_over_http(service, models_dir / "squeezenet1_1.onnx", tmp_path)
    assert "redis" in service.log.read_text()  # the worker said which broker it uses


def test_kiln_submit_waits_and_downloads(live_service, models_dir, tmp_path):
    out = tmp_path / "submitted.tar.gz"
    result = subprocess.run([sys.executable, "-m", "cli.main", "submit", str(models_dir / "squeezenet1_1.onnx"),
                             "--server", live_service.url, "--token", live_service.token, "-t", "native", "--wait",
                             "-o", str(out)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert out.is_file() and not list(tmp_path.glob(".submitted*"))
    assert_artifact_matches_onnxruntime(out, models_dir / "squeezenet1_1.onnx")


def test_kiln_submit_reports_a_refused_model(live_service, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"definitely not onnx")
    result = subprocess.run([sys.executable, "-m", "cli.main", "submit", str(bad), "--server", live_service.url,
                             "--token", live_service.token, "--wait", "-o", str(tmp_path / "x.tar.gz")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kiln: error: upload failed: HTTP 422") and "not an ONNX model" in lines[0]
    assert not (tmp_path / "x.tar.gz").exists()


def test_tuning_job_runs_on_the_measure_queue(live_service, make_model):
    """A job with a tuning budget goes to measure.<device kind>; the embedded worker serves it."""
    with httpx.Client(base_url=live_service.url, headers=live_service.headers, timeout=120) as client:
        model = client.post("/api/v1/models", files={"file": ("tiny.onnx", make_model(seed=7))}).json()
        job = client.post("/api/v1/jobs", json={"model_id": model["id"], "tuning": {"trials": 4}}).json()
        states = _follow_events(client, job["id"])
        assert states[-1]["status"] == "succeeded", states[-1]
        assert any(s["stage"].startswith("tuning ") for s in states) or \
            client.get(states[-1]["links"]["report"]).json()["tuning"]["cache_hits"] > 0
        report = client.get(states[-1]["links"]["report"]).json()
    assert report["tuning"]["trials"] + report["tuning"]["cache_hits"] > 0
