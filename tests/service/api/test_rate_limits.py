"""Per-user limits: uploads and jobs per minute, uploads and active jobs at once; 429 with Retry-After."""
from __future__ import annotations

import pytest
from fastapi import HTTPException

from service.api.rate_limits import Limiter


def test_sliding_window_forgets_after_a_minute():
    now = [0.0]
    limiter = Limiter(clock=lambda: now[0])
    for _ in range(3):
        limiter.hit("uploads", 1, per_minute=3)
    with pytest.raises(HTTPException) as refused:
        limiter.hit("uploads", 1, per_minute=3)
    assert refused.value.status_code == 429 and refused.value.headers["Retry-After"] == "60"
    limiter.hit("uploads", 2, per_minute=3)  # another user has their own window
    now[0] = 45.0
    with pytest.raises(HTTPException) as refused:
        limiter.hit("uploads", 1, per_minute=3)
    assert refused.value.headers["Retry-After"] == "15"
    now[0] = 60.0
    limiter.hit("uploads", 1, per_minute=3)


def test_in_flight_counts_down_when_done():
    limiter = Limiter()
    with limiter.in_flight("uploads", 1, limit=1):
        with pytest.raises(HTTPException) as refused:
            with limiter.in_flight("uploads", 1, limit=1):
                pass
        assert refused.value.status_code == 429
    with limiter.in_flight("uploads", 1, limit=1):
        pass


def test_uploads_per_minute_is_429_with_retry_after(api, make_model, monkeypatch):
    monkeypatch.setattr(api.settings, "uploads_per_minute", 2)
    headers = api.auth()
    assert [api.upload(headers, make_model(seed=i)).status_code for i in range(2)] == [201, 201]
    refused = api.upload(headers, make_model(seed=3))
    assert refused.status_code == 429
    assert "at most 2 a minute" in refused.json()["detail"]["message"]
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert api.upload(api.auth("bob"), make_model(seed=3)).status_code == 201  # limits are per user
    assert len(list(api.settings.models_dir.iterdir())) == 3 and list(api.settings.tmp_dir.iterdir()) == []


def test_missing_token_is_401_not_429(api, make_model, monkeypatch):
    monkeypatch.setattr(api.settings, "uploads_per_minute", 1)
    api.upload(api.auth(), make_model())
    assert api.upload({}, make_model()).status_code == 401


def test_jobs_per_minute_is_429(api, make_model, monkeypatch):
    monkeypatch.setattr(api.settings, "jobs_per_minute", 2)
    headers = api.auth()
    model = api.upload(headers, make_model()).json()
    codes = [api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"]}).status_code
             for _ in range(3)]
    assert codes == [201, 201, 429]
    assert len(api.queued) == 2


def test_active_jobs_per_user_is_429_until_one_ends(api, make_model, monkeypatch):
    monkeypatch.setattr(api.settings, "max_active_jobs", 2)
    headers = api.auth()
    model = api.upload(headers, make_model()).json()
    post = lambda: api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"]})  # noqa: E731
    first, _ = post().json(), post()
    refused = post()
    assert refused.status_code == 429 and "2 queued or running jobs" in refused.json()["detail"]["message"]
    assert refused.headers["Retry-After"] == "30"
    assert api.client.delete(f"/api/v1/jobs/{first['id']}", headers=headers).status_code == 200
    assert post().status_code == 201
