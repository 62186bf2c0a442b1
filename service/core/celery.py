"""The Celery app's configuration: the API sends jobs through it by task name, workers/celery_app.py runs them."""
from __future__ import annotations

from celery import Celery

from .queues import COMPILE_QUEUE
from .settings import Settings


def _transport_options(settings: Settings) -> dict:
    if settings.broker.startswith("sqla+"):
        # kombu hands this transport's options to sqlalchemy.create_engine, so its polling interval
        # (1 s by default, the delay between queued and running) can only be set on the class.
        from kombu.transport.sqlalchemy import Transport

        Transport.polling_interval = 0.2
        return {}
    # Redis redelivers an unacknowledged job after this long: longer than any job may run.
    return {"visibility_timeout": settings.job_hard_time_limit_s + 600}


def create_celery(settings: Settings) -> Celery:
    """On the settings' broker and result store: SQLite files by default, Redis at scale."""
    settings.ensure_dirs()
    app = Celery("kiln", broker=settings.broker, backend=settings.results,
                 include=["workers.tasks", "workers.measure_tasks"])
    app.conf.update(
        task_default_queue=COMPILE_QUEUE,
        task_routes={"kiln.compile": {"queue": COMPILE_QUEUE}},
        # A job is acknowledged only when it ends, one at a time per process: a crashed worker's job
        # is redelivered instead of lost, and a long compile never holds a second job hostage.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_soft_time_limit=settings.job_soft_time_limit_s,
        task_time_limit=settings.job_hard_time_limit_s,
        task_ignore_result=False,
        result_expires=7 * 24 * 3600,
        broker_connection_retry_on_startup=True,
        broker_transport_options=_transport_options(settings),
        worker_max_tasks_per_child=50,  # each compile dlopens libraries; recycle the process now and then
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
    )
    return app
