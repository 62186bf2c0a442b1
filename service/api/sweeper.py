"""Re-queues jobs whose worker died: a running job with no heartbeat for `stale_after_s` goes back to the queue."""
from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Callable

from sqlalchemy import and_, or_, select
from starlette.concurrency import run_in_threadpool

from service.core.db import Database
from service.core.job_state import transition
from service.core.settings import Settings
from service.core.tables import Job, utcnow

log = logging.getLogger("kiln.sweeper")


def requeue_stale_jobs(database: Database, settings: Settings, enqueue: Callable[[str], None]) -> list[str]:
    """The SQLite transport never redelivers an unacknowledged task, so this does; with Redis it also
    catches a worker that hangs. The job's attempt counter (checked by the worker) stops poison jobs."""
    cutoff = utcnow() - timedelta(seconds=settings.stale_after_s)
    requeued = []
    with database.session() as db:
        stale = db.scalars(select(Job.id).where(Job.status == "running", or_(
            Job.heartbeat_at < cutoff, and_(Job.heartbeat_at.is_(None), Job.started_at < cutoff)))).all()
        for job_id in stale:
            if _requeue(db, job_id, enqueue):
                log.warning("job %s lost its worker; queued again", job_id)
                requeued.append(job_id)
    return requeued


def requeue_jobs_of_worker(database: Database, worker_prefix: str, enqueue: Callable[[str], None]) -> list[str]:
    """The running jobs of a worker that was just stopped (its name starts with `worker_prefix`), queued again at
    once: `kiln serve` stopping its embedded worker (Ctrl+C) does not leave them `running` until the next start."""
    requeued = []
    with database.session() as db:
        running = db.scalars(select(Job.id).where(Job.status == "running",
                                                  Job.worker.startswith(worker_prefix, autoescape=True))).all()
        for job_id in running:
            if _requeue(db, job_id, enqueue):
                log.warning("job %s: its worker was stopped; queued again", job_id)
                requeued.append(job_id)
    return requeued


def _requeue(db, job_id: str, enqueue: Callable[[str], None]) -> bool:
    # Conditional: if the worker finished (or the user cancelled) meanwhile, leave the job alone.
    if not transition(db, job_id, ("running",), status="queued", stage="queued", progress=0.0, worker=None):
        return False
    try:
        enqueue(job_id)
    except Exception:
        # The broker is down: a queued job without a message would wait forever. Back to running
        # with its stale heartbeat, so the next sweep tries again.
        transition(db, job_id, ("queued",), status="running")
        raise
    return True


async def sweep_forever(database: Database, settings: Settings, enqueue: Callable[[str], None]) -> None:
    while True:
        await asyncio.sleep(settings.sweep_interval_s)
        try:
            await run_in_threadpool(requeue_stale_jobs, database, settings, enqueue)
        except Exception:  # a broker or database hiccup: try again at the next sweep
            log.exception("sweeping stale jobs failed")
