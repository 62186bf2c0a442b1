"""GET /health: no token; database and broker reachability, queued jobs and the workers whose beat is fresh."""
from __future__ import annotations

import json

from fastapi.testclient import TestClient

from service.api.app import create_app
from service.core.settings import Settings
from service.core.worker_beats import BEAT_INTERVAL_S, FRESH_FOR_S, start_beating, workers_seen, write_beat


def test_health_reports_database_broker_queue_and_workers(api, make_model):
    body = api.client.get("/api/v1/health").json()
    assert body["status"] == "ok" and body["database"]["reachable"] and body["broker"]["reachable"]
    assert body["database"]["queued_jobs"] == 0 and body["workers"] == {"seen": 0, "workers": []}
    headers = api.auth()
    model = api.upload(headers, make_model()).json()
    api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"]})
    stop = start_beating(api.settings.data_dir, "kiln-1@box", ["compile", "measure.x86-64-v3"])
    try:
        body = api.client.get("/api/v1/health").json()
        assert body["database"]["queued_jobs"] == 1
        assert body["workers"]["seen"] == 1
        assert body["workers"]["workers"][0]["name"] == "kiln-1@box"
        assert body["workers"]["workers"][0]["queues"] == ["compile", "measure.x86-64-v3"]
    finally:
        stop()
    assert api.client.get("/api/v1/health").json()["workers"]["seen"] == 0  # a stopped worker removes its beat


def test_a_stale_beat_is_not_a_worker(tmp_path):
    # Judged at instants set from the beat's own time, never from how long this test took.
    seen_at = json.loads(write_beat(tmp_path, "gone@box", ["compile"]).read_text())["seen_at"]
    assert [w["name"] for w in workers_seen(tmp_path, now=seen_at + FRESH_FOR_S)] == ["gone@box"]
    assert workers_seen(tmp_path, now=seen_at + FRESH_FOR_S + BEAT_INTERVAL_S) == []


def test_an_unreachable_broker_is_a_503_that_says_so(tmp_path):
    settings = Settings(data_dir=tmp_path, broker_url="redis://127.0.0.1:9/0")
    with TestClient(create_app(settings, enqueue=lambda job_id: None)) as client:
        response = client.get("/api/v1/health")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable" and body["database"]["reachable"]
    assert body["broker"]["reachable"] is False and body["broker"]["transport"] == "redis"
    assert "127.0.0.1:9" in body["broker"]["error"]
