"""The workers' Celery app (configured by service.core.celery) and how its pool processes take SIGTERM."""
from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from typing import Iterator

from celery.signals import worker_process_init, worker_ready, worker_shutdown

from service.core.celery import create_celery
from service.core.settings import get_settings
from service.core.worker_beats import start_beating


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


_beat: dict = {}  # "stop": ends this worker's beat


@worker_ready.connect
def _start_beat(sender=None, **_) -> None:
    """The worker's beat for /health (workers seen), from its main process while it runs."""
    queues = sorted(q.name for q in sender.task_consumer.queues) if sender is not None else []
    name = getattr(sender, "hostname", None) or f"kiln-{os.getpid()}"
    _beat["stop"] = start_beating(get_settings().data_dir, name, queues)


@worker_shutdown.connect
def _stop_beat(**_) -> None:
    if "stop" in _beat:
        _beat.pop("stop")()


app = create_celery(get_settings())
