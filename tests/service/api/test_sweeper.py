"""The sweeper: a job whose worker went silent is queued again, and stays sweepable while the broker is down."""
from __future__ import annotations

from datetime import timedelta

import pytest

from service.api.sweeper import requeue_stale_jobs
from service.core.job_state import transition
from service.core.tables import Job, utcnow


def test_a_stale_job_the_broker_cannot_take_is_swept_again_later(api, make_model):
    headers = api.auth()
    model = api.upload(headers, make_model()).json()
    job_id = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"]}).json()["id"]
    with api.app.state.db.session() as db:
        transition(db, job_id, ("queued",), status="running", attempts=1,
                   heartbeat_at=utcnow() - timedelta(seconds=api.settings.stale_after_s + 5))

    def broker_down(_job_id: str) -> None:
        raise ConnectionError("redis is gone")

    with pytest.raises(ConnectionError):
        requeue_stale_jobs(api.app.state.db, api.settings, broker_down)
    with api.app.state.db.session() as db:
        assert db.get(Job, job_id).status == "running"  # not queued without a message
    api.queued.clear()
    assert requeue_stale_jobs(api.app.state.db, api.settings, api.queued.append) == [job_id] == api.queued
