"""The Celery app's configuration: the API sends jobs through it by task name, workers/celery_app.py runs them."""
from __future__ import annotations

import sqlite3

from celery import Celery

from .queues import COMPILE_QUEUE
from .settings import Settings


def _transport_options(settings: Settings) -> dict:
    if settings.broker.startswith("sqla+"):
        # kombu hands this transport's options to sqlalchemy.create_engine, so its polling interval
        # (1 s by default, the delay between queued and running) can only be set on the class.
        from kombu.transport.sqlalchemy import Transport

        Transport.polling_interval = 0.2
        _sqlite_broker_in_wal_mode()
        return {}
    # Redis redelivers an unacknowledged job after this long: longer than any job may run.
    return {"visibility_timeout": settings.job_hard_time_limit_s + 600}


_BROKER_FILE = "broker.db"


def _broker_pragmas(connection, _record) -> None:
    """The metadata database's pragmas on an SQLite broker file: WAL (the workers' polls no longer block a send)
    and synchronous=NORMAL (a commit writes the log without an fsync; a crashed process loses nothing). A job's
    send spent 16 ms in its commit's two fsyncs, more with compiles writing to the same disk (bench_load.py)."""
    if not isinstance(connection, sqlite3.Connection):
        return
    cursor = connection.cursor()
    try:
        if any(str(row[2]).endswith(_BROKER_FILE) for row in cursor.execute("PRAGMA database_list")):
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def _sqlite_broker_in_wal_mode() -> None:
    """kombu makes the broker's engine itself: every SQLite connection this process opens is looked at."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    if not event.contains(Engine, "connect", _broker_pragmas):
        event.listen(Engine, "connect", _broker_pragmas)


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
