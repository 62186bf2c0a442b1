"""A function over indices on forked worker processes, its results yielded as they come (a model's kernels lowered on
several cores: core/lowering/executable.py); one call on a forked child while this process goes on (`forked_call`:
the validation reference computed during the build, core/driver/reference_ahead.py).

Forked, not spawned: a child starts at once with everything the parent imported and built (the graph, the backend,
the schedules), so only an index goes out and only the result (a pickle) comes back. Children exit when their
task pipe closes. An error in one ends the others and runs its index again here, which raises the same error with
a traceback of this process (else the child's, by its class and message: core/process/sandbox.py's transport); a
child that dies without an answer has its index run here.
"""
from __future__ import annotations

import gc
import os
import select
import signal
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional

from .channel import FrameReader, messages, send
from .child import die_with_parent
from .sandbox import error_message, rebuild_error


@dataclass
class _Worker:
    pid: int
    tasks: Any  # the write end of its task pipe (a binary file)
    answers: FrameReader
    index: Optional[int] = None  # the index it is working on


def forked_map(work: Callable[[int], Any], indices: Iterable[int], jobs: int) -> Iterator[tuple[int, Any]]:
    """(index, work(index)) for each index, in the order they finish, on up to `jobs` forked children; in this
    process, in order, when `jobs` or the indices are fewer than two. `work`'s results must pickle."""
    pending = deque(indices)
    jobs = min(jobs, len(pending))
    if jobs < 2:
        for index in pending:
            yield index, work(index)
        return
    workers: list[_Worker] = []
    gc.freeze()  # the children's collector leaves the parent's objects alone (no walk, no copy-on-write of them)
    try:
        for _ in range(jobs):
            workers.append(_start(work, workers))
        gc.unfreeze()
        while True:
            for worker in [w for w in workers if w.index is None]:
                if pending and not _give(worker, pending):
                    workers.remove(worker)
            busy = {w.answers.fd: w for w in workers if w.index is not None}
            if not busy:
                break
            ready, _, _ = select.select(list(busy), [], [])
            for fd in ready:
                worker = busy[fd]
                index, worker.index = worker.index, None
                try:
                    answer = worker.answers.next()
                except EOFError:  # it died (killed, out of memory): this process runs its index
                    _end(worker)
                    workers.remove(worker)
                    yield index, work(index)
                    continue
                if answer[0] == "error":  # run here (the others ended first): the same error, with its traceback
                    _end_all(workers)
                    work(index)
                    raise rebuild_error(*answer[2:7])  # it passed here: the child's error after all
                yield index, answer[2]
        for index in pending:  # every child died
            yield index, work(index)
    finally:
        gc.unfreeze()
        _end_all(workers)


class ForkedCall:
    """`fn()` running on a forked child from now on; `result()` (once) waits for its value. As in forked_map, an error in
    the child runs `fn` here (the same error, with this process's traceback), and a child that died, or one cancelled
    before `result()`, has `fn` run here. `cancel()` ends the child when its result is not wanted (always safe)."""

    def __init__(self, fn: Callable[[], Any]):
        self._fn = fn
        gc.freeze()  # as in forked_map: the child's collector leaves the parent's objects alone
        try:
            self._worker: Optional[_Worker] = _start(lambda _: fn(), [])
        finally:
            gc.unfreeze()
        if not _give(self._worker, deque([0])):
            self._worker = None

    def result(self) -> Any:
        worker, self._worker = self._worker, None
        if worker is None:  # the child was gone before it had its task, or it was cancelled
            return self._fn()
        try:
            answer = worker.answers.next()
        except EOFError:  # it died: this process calls fn
            answer = None
        _end(worker)  # killed, not left to see its task pipe close: a later fork of this process may hold that open
        if answer is None:
            return self._fn()
        if answer[0] == "error":
            self._fn()
            raise rebuild_error(*answer[2:7])  # it passed here: the child's error after all
        return answer[2]

    def cancel(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            _end(worker)

    def __del__(self):  # a compile that failed before it wanted the result: the child is ended and reaped
        try:
            self.cancel()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _start(work: Callable[[int], Any], others: list[_Worker]) -> _Worker:
    task_read, task_write = os.pipe()
    answer_read, answer_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        os.close(task_write)
        os.close(answer_read)
        for other in others:  # its siblings' pipes: held here, a sibling would never see its task pipe close
            other.tasks.close()
            os.close(other.answers.fd)
        _serve(work, task_read, answer_write)
    os.close(task_read)
    os.close(answer_write)
    return _Worker(pid, os.fdopen(task_write, "wb"), FrameReader(answer_read))


def _serve(work: Callable[[int], Any], task_fd: int, answer_fd: int) -> None:  # pragma: no cover - in the child
    code = 0
    try:
        # A session of its own, as a spawned build worker has (core/process/child.py): under the kernel's autogroup
        # scheduling each session gets its share of a busy machine, so the children are not one share together.
        os.setsid()
        die_with_parent()
        answers = os.fdopen(answer_fd, "wb")
        for index in messages(os.fdopen(task_fd, "rb")):
            try:
                outcome = ("result", index, work(index))
            except BaseException as err:  # noqa: BLE001 - the parent raises it
                outcome = ("error", index) + error_message(err)[1:]
            try:
                send(answers, outcome)
            except Exception as err:  # an unpicklable result (send writes nothing then): its error instead
                send(answers, ("error", index) + error_message(err)[1:])
    except BaseException:  # noqa: BLE001 - the parent is gone or stopped listening
        code = 1
    finally:
        os._exit(code)  # never the parent's atexit handlers, finalizers or test framework


def _give(worker: _Worker, pending: deque) -> bool:
    """Sends it the next index; False (the index stays pending, the child is reaped) when it is gone."""
    index = pending.popleft()
    try:
        send(worker.tasks, index)
    except OSError:
        pending.appendleft(index)
        _end(worker)
        return False
    worker.index = index
    return True


def _end_all(workers: list[_Worker]) -> None:
    while workers:
        _end(workers.pop())


def _end(worker: _Worker) -> None:
    """Closes its task pipe (an idle child exits) and reaps it; one still working is killed first."""
    if worker.index is not None:
        try:
            os.kill(worker.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for close in (worker.tasks.close, lambda: os.close(worker.answers.fd)):
        try:
            close()
        except OSError:
            pass
    try:
        os.waitpid(worker.pid, 0)
    except ChildProcessError:
        pass
