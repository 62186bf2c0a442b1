"""SIGTERM in a pool process: blocked outside jobs (billiard's shared-queue locks), taken inside one.
The end-to-end case, a pool process killed mid-job, is tests/reliability/test_worker_signals.py."""
from __future__ import annotations

import signal
import threading

from workers.celery_app import _block_sigterm_outside_jobs, sigterm_allowed


def _in_thread(body) -> dict:
    """Runs `body` in its own thread (signal masks are per thread), returning what it recorded."""
    seen: dict = {}
    thread = threading.Thread(target=body, args=(seen,))
    thread.start()
    thread.join()
    return seen


def _blocked() -> bool:
    return signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, set())


def test_a_pool_process_takes_sigterm_only_inside_a_job():
    def body(seen):
        _block_sigterm_outside_jobs()  # what worker_process_init runs in each new pool process
        seen["idle"] = _blocked()
        with sigterm_allowed():
            seen["job"] = _blocked()
        seen["after"] = _blocked()

    assert _in_thread(body) == {"idle": True, "job": False, "after": True}


def test_outside_a_pool_process_the_job_leaves_sigterm_as_it_was():
    def body(seen):
        with sigterm_allowed():
            seen["job"] = _blocked()
        seen["after"] = _blocked()

    assert _in_thread(body) == {"job": False, "after": False}
