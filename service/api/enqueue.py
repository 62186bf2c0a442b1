"""Sends compile jobs to the workers through the Celery broker, by task name: the API never imports the tasks."""
from __future__ import annotations

from typing import Callable

from core.backends import resolve
from service.core.db import Database
from service.core.queues import job_queue
from service.core.settings import Settings
from service.core.tables import Job


def celery_enqueue(settings: Settings, database: Database) -> Callable[[str], None]:
    """A function that queues a job by id on the queue it needs: `compile`, `gpu`, or `measure.<device kind>`
    when it tunes (read from the job's row, so the sweeper re-queues a job the same way)."""
    from service.core.celery import create_celery  # here: an app given its own enqueue never loads Celery

    celery = create_celery(settings)

    def enqueue(job_id: str) -> None:
        with database.session() as db:
            job = db.get(Job, job_id)
            queue = job_queue(*resolve(job.target), int(job.tuning.get("trials", 0)))
        celery.send_task("kiln.compile", args=[job_id], queue=queue, task_id=f"compile-{job_id}")
    return enqueue
