"""SIGTERM in a pool process: blocked outside jobs (billiard's shared-queue locks), inside one it
ends the process at once. The end-to-end case, a pool process killed mid-job, is
tests/reliability/test_worker_signals.py."""
from __future__ import annotations

import signal

import pytest

from workers.celery_app import _block_sigterm_outside_jobs, _exit_now, sigterm_allowed


def _state() -> tuple:
    blocked = signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    return blocked, signal.getsignal(signal.SIGTERM)


@pytest.fixture
def restore_sigterm():
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    handler = signal.getsignal(signal.SIGTERM)
    yield handler
    signal.signal(signal.SIGTERM, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def test_a_pool_process_takes_sigterm_only_inside_a_job(restore_sigterm):
    _block_sigterm_outside_jobs()  # what worker_process_init runs in each new pool process
    assert _state() == (True, restore_sigterm)
    with sigterm_allowed():
        assert _state() == (False, _exit_now)
    assert _state() == (True, restore_sigterm)


def test_outside_a_pool_process_the_job_leaves_sigterm_as_it_was(restore_sigterm):
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    with sigterm_allowed():
        assert _state() == (False, _exit_now)
    assert _state() == (False, restore_sigterm)
