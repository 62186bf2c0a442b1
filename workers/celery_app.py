"""The Celery app, configured from the service settings (SQLite broker by default, Redis at scale)."""
from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from typing import Iterator

from celery import Celery
from celery.signals import worker_process_init

from service.settings import Settings, get_settings

from .queues import COMPILE_QUEUE


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
    settings.ensure_dirs()
    app = Celery("kiln", broker=settings.broker, backend=settings.results, include=["workers.tasks"])
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


@worker_process_init.connect
def _block_sigterm_outside_jobs(**_) -> None:
    """A pool process that dies holding the lock of the result queue it shares with its siblings
    leaves that lock taken: the replacement process waits on it forever (py-spy: SemLock.__enter__
    under SimpleQueue.put) and the worker takes no job again. So a pool process keeps SIGTERM
    blocked (pending, not lost) and takes it only inside a job (`sigterm_allowed`), never in
    billiard's queue code."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def _exit_now(signum, frame) -> None:
    # Billiard's own handler resets SIGTERM to its default action and raises SystemExit, which
    # Python drops ("Exception ignored") when it lands in a weakref callback or a __del__: the job
    # then ran on, and the process could die of a later signal anywhere. An exit here cannot be
    # dropped; the sandboxed compile dies with us (PDEATHSIG) and the next attempt clears its
    # staging folder.
    os._exit(128 + signum)


@contextmanager
def sigterm_allowed() -> Iterator[None]:
    """Within a job: a SIGTERM, pending or new, ends the pool process at once (the worker then
    queues the job again: acks_late and reject_on_worker_lost, or the sweeper). Threads the job
    starts inherit the unblocked mask, so they must end with the job. Outside a pool process
    SIGTERM was never blocked and only the handler changes, for the job's duration."""
    if threading.current_thread() is not threading.main_thread():  # not a prefork pool process
        yield
        return
    handler = signal.signal(signal.SIGTERM, _exit_now)
    before = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before | {signal.SIGTERM})
        signal.signal(signal.SIGTERM, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


app = create_celery(get_settings())
