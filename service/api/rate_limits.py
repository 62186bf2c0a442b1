"""Per-user limits: requests per minute and work in flight at once, answered 429 with a Retry-After header."""
from __future__ import annotations

import math
import threading
import time
from collections import defaultdict, deque
from contextlib import contextmanager
from typing import Annotated, Iterator

from fastapi import Depends, HTTPException, Request, status
from sqlalchemy import func, select

from service.core.job_state import ACTIVE
from service.core.tables import Job

from .deps import DbDep, SettingsDep, UserDep

WINDOW_S = 60.0


def too_many(message: str, retry_after_s: float) -> HTTPException:
    return HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, message,
                         headers={"Retry-After": str(max(1, math.ceil(retry_after_s)))})


class Limiter:
    """Sliding-window rates and in-flight counters, keyed by (kind, user), counted in this API process."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[tuple, deque] = defaultdict(deque)
        self._in_flight: dict[tuple, int] = defaultdict(int)

    def hit(self, kind: str, user_id: int, per_minute: int) -> None:
        """Counts one request; 429 if the user made `per_minute` of this kind in the last minute."""
        now = self._clock()
        with self._lock:
            seen = self._seen[(kind, user_id)]
            while seen and now - seen[0] >= WINDOW_S:
                seen.popleft()
            if len(seen) >= per_minute:
                raise too_many(f"too many {kind}: at most {per_minute} a minute per user", WINDOW_S - (now - seen[0]))
            seen.append(now)

    @contextmanager
    def in_flight(self, kind: str, user_id: int, limit: int) -> Iterator[None]:
        key = (kind, user_id)
        with self._lock:
            if self._in_flight[key] >= limit:
                raise too_many(f"too many {kind} at once: at most {limit} per user; wait for one to finish", 5)
            self._in_flight[key] += 1
        try:
            yield
        finally:
            with self._lock:
                self._in_flight[key] -= 1


def _limiter(request: Request) -> Limiter:
    return request.app.state.limiter


def upload_allowed(request: Request, user: UserDep, settings: SettingsDep) -> Iterator[None]:
    """Before a byte of the body is read: the user's upload rate and uploads in flight."""
    limiter = _limiter(request)
    limiter.hit("uploads", user.id, settings.uploads_per_minute)
    with limiter.in_flight("uploads", user.id, settings.max_concurrent_uploads):
        yield


def job_allowed(request: Request, user: UserDep, db: DbDep, settings: SettingsDep) -> None:
    """The user's job rate, and their active jobs: counted in the database, so that limit holds across API processes."""
    _limiter(request).hit("jobs", user.id, settings.jobs_per_minute)
    active = db.scalar(select(func.count()).select_from(Job).where(Job.user_id == user.id, Job.status.in_(ACTIVE)))
    # Release the connection before the route waits for a thread: 200 submissions at once otherwise held
    # every pooled connection while waiting for threads that were waiting for connections (bench_load.py).
    db.commit()
    if active >= settings.max_active_jobs:
        raise too_many(f"you have {active} queued or running jobs, the most this server allows per user; "
                       "wait for some to finish or cancel them", 30)


UploadAllowed = Annotated[None, Depends(upload_allowed)]
JobAllowed = Annotated[None, Depends(job_allowed)]
