"""Server-Sent Events for one job: the job's state whenever it changes, until it ends."""
from __future__ import annotations

import asyncio
import json
import time
from typing import AsyncIterator

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from service.core.db import Database
from service.core.job_state import TERMINAL
from service.core.security import user_for_token
from service.core.tables import Job

from .schemas.jobs import JobOut

KEEPALIVE_S = 15.0


def _read(database: Database, job_id: str, token: str):
    """The job, or None when it is gone; False when the token that opened the stream is no longer valid."""
    with database.session() as db:
        if user_for_token(db, token) is None:
            return False
        job = db.get(Job, job_id)
        return JobOut.of(job) if job else None


def _event(name: str, payload: str) -> str:
    return f"event: {name}\ndata: {payload}\n\n"


async def job_events(database: Database, job_id: str, token: str, request: Request,
                     poll_s: float) -> AsyncIterator[str]:
    """Polls the job every `poll_s` (workers write progress to the database; a poll is two indexed reads: the job,
    and the token that opened the stream, so that revoking it ends the stream within a poll)."""
    yield "retry: 2000\n\n"
    last, quiet_since = None, time.monotonic()
    while not await request.is_disconnected():
        job = await run_in_threadpool(_read, database, job_id, token)
        if job is False:
            yield _event("end", '{"status": "unauthorized"}')
            return
        if job is None:
            yield _event("end", '{"status": "deleted"}')
            return
        state = (job.status, job.stage, job.progress, job.error, job.tuning, job.tuning_progress)
        if state != last:
            last, quiet_since = state, time.monotonic()
            yield _event("progress", job.model_dump_json())
            if job.status in TERMINAL:
                yield _event("end", json.dumps({"status": job.status}))
                return
        elif time.monotonic() - quiet_since > KEEPALIVE_S:
            quiet_since = time.monotonic()
            yield ": keep-alive\n\n"
        await asyncio.sleep(poll_s)
