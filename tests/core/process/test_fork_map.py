"""forked_map: results from forked children, the one error of a failing index, children ended, dead children covered;
ForkedCall: one call on a forked child, the same guarantees."""
from __future__ import annotations

import os

import pytest

from core.errors import KilnError
from core.process.fork_map import ForkedCall, forked_map


class _Refused(KilnError):
    code = "refused"

    def __init__(self, what: str, why: str):  # two arguments: not rebuilt by unpickling
        super().__init__(f"{what}: {why}")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_every_index_is_worked_once_on_children_that_are_reaped():
    parent = os.getpid()
    results = list(forked_map(lambda i: (i * i, os.getpid()), range(7), jobs=3))
    assert sorted(i for i, _ in results) == list(range(7))
    assert all(square == i * i for i, (square, _) in results)
    pids = {pid for _, (_, pid) in results}
    assert parent not in pids and 1 < len(pids) <= 3
    assert all(_gone(pid) for pid in pids)


def test_one_job_or_one_index_runs_here_in_order():
    parent = os.getpid()
    assert list(forked_map(lambda i: os.getpid(), [4, 2, 9], jobs=1)) == [(4, parent), (2, parent), (9, parent)]
    assert list(forked_map(lambda i: os.getpid(), [5], jobs=4)) == [(5, parent)]


def test_an_error_in_a_child_is_raised_here_with_its_type_and_the_other_children_end():
    parent, seen = os.getpid(), []

    def work(i: int) -> int:
        if i == 3:
            raise _Refused(f"index {i}", "refused on purpose")
        return os.getpid()

    with pytest.raises(_Refused, match="index 3: refused on purpose"):
        for _, pid in forked_map(work, range(6), jobs=2):
            seen.append(pid)
    assert all(_gone(pid) for pid in seen if pid != parent)


def test_a_child_that_dies_has_its_index_run_here():
    parent = os.getpid()

    def work(i: int) -> int:
        if i == 1 and os.getpid() != parent:
            os._exit(3)  # a crash with no answer
        return os.getpid()

    results = dict(forked_map(work, range(4), jobs=2))
    assert sorted(results) == [0, 1, 2, 3] and results[1] == parent


def test_an_unpicklable_result_is_an_error_not_a_hang():
    with pytest.raises(Exception, match="pickle"):
        list(forked_map(lambda i: (lambda: i), range(3), jobs=2))


def test_a_forked_call_runs_on_a_child_while_this_process_goes_on_and_the_child_is_reaped():
    parent = os.getpid()
    read, write = os.pipe()
    call = ForkedCall(lambda: (os.read(read, 1), os.getpid()))  # it waits until this process has gone on
    os.write(write, b"x")
    byte, pid = call.result()
    assert byte == b"x" and pid != parent and _gone(pid)


def test_a_forked_call_error_is_raised_here_with_its_type():
    def refuse() -> int:
        raise _Refused("the call", "refused on purpose")

    with pytest.raises(_Refused, match="the call: refused on purpose"):
        ForkedCall(refuse).result()


def test_a_forked_call_whose_child_dies_or_that_was_cancelled_runs_here():
    parent = os.getpid()

    def crash_in_child() -> int:
        if os.getpid() != parent:
            os._exit(3)
        return os.getpid()

    assert ForkedCall(crash_in_child).result() == parent
    read, write = os.pipe()
    waiting = ForkedCall(lambda: os.read(read, 1) and os.getpid())  # never answers before it is cancelled
    pid = waiting._worker.pid
    waiting.cancel()
    assert _gone(pid)  # killed and reaped
    os.write(write, b"x")
    assert waiting.result() == parent  # wanted after all: it runs here
