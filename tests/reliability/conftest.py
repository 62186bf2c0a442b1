"""Fault-test fixtures: a fast heartbeat sweeper, and polling a job over the API until it gets somewhere."""
from __future__ import annotations

import time

import pytest

TERMINAL = ("succeeded", "failed", "cancelled")


@pytest.fixture
def database_url() -> None:
    """SQLite only here: these tests break the compile or the input, not the database, and the PostgreSQL run
    of tests/service and tests/workers already covers every query they make."""
    return None


@pytest.fixture
def fast_sweep() -> dict:
    """Settings under which a silent worker is noticed within seconds, not the production 45 s."""
    return {"KILN_HEARTBEAT_S": "0.5", "KILN_STALE_AFTER_S": "4", "KILN_SWEEP_INTERVAL_S": "1"}


@pytest.fixture
def wait_for_job():
    def wait(client, job_id: str, predicate, timeout_s: float = 300) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            job = client.get(f"/api/v1/jobs/{job_id}").json()
            if predicate(job):
                return job
            time.sleep(0.05)
        raise TimeoutError(f"job {job_id} never got there: {job}")
    return wait


@pytest.fixture
def ended():
    return lambda job: job["status"] in TERMINAL
