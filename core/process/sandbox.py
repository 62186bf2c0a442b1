"""Runs a function in a forked child with resource limits, so a crash, hang or runaway in it costs only the child.

For code Kiln generated and now executes (validation, benchmarks, the tuner's measurements): a
segfault, an infinite loop, a huge allocation or an endless write fails that call with a
SandboxError; the calling process (an API or a Celery worker) carries on.
"""
from __future__ import annotations

import ctypes
import os
import pickle
import resource
import select
import signal
import struct
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ..errors import KilnError

_HEADER = struct.Struct("!Q")
_PR_SET_PDEATHSIG = 1


class SandboxError(KilnError):
    """The sandboxed child crashed, ran out of time, or hit a resource limit."""

    code = "sandbox_failed"


class SandboxTimeout(SandboxError):
    code = "timeout"


@dataclass(frozen=True)
class Limits:
    """Per-child limits; None leaves a limit as inherited. Sizes in bytes, times in seconds."""

    wall_s: Optional[float] = None       # killed (with its process group) after this long
    cpu_s: Optional[int] = None          # RLIMIT_CPU: SIGXCPU, then SIGKILL
    memory_bytes: Optional[int] = None   # RLIMIT_AS: allocations fail (MemoryError) past it
    file_bytes: Optional[int] = None     # RLIMIT_FSIZE: writes past it fail with EFBIG
    open_files: Optional[int] = 256      # RLIMIT_NOFILE
    processes: Optional[int] = None      # RLIMIT_NPROC counts the whole user's threads: only for lone measurers


def _apply(limits: Limits) -> None:
    os.setsid()  # its own session and process group: a timeout kills everything it started
    try:  # die with the parent: a worker killed by its time limit must not leave a compile running
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    # A write past RLIMIT_FSIZE raises SIGXFSZ, which kills by default; ignored, the write fails with EFBIG.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    for which, value in ((resource.RLIMIT_CPU, limits.cpu_s), (resource.RLIMIT_AS, limits.memory_bytes),
                         (resource.RLIMIT_FSIZE, limits.file_bytes), (resource.RLIMIT_NOFILE, limits.open_files),
                         (resource.RLIMIT_NPROC, limits.processes)):
        if value is not None:
            _, hard = resource.getrlimit(which)
            value = int(value) if hard == resource.RLIM_INFINITY else min(int(value), hard)
            resource.setrlimit(which, (value, value if which != resource.RLIMIT_CPU else hard))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _send(fd: int, message: tuple) -> None:
    data = pickle.dumps(message)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _error_message(err: BaseException) -> tuple:
    # KilnError subclasses take different constructor arguments: send class, code and text, not the object.
    return ("error", type(err).__module__, type(err).__qualname__, getattr(err, "code", None), str(err),
            isinstance(err, KilnError), traceback.format_exc(limit=20))


def _child(fd: int, func: Callable, args: tuple, kwargs: dict, limits: Limits) -> None:
    code = 0
    try:
        _apply(limits)
        report = lambda *message: _send(fd, ("message", message))  # noqa: E731
        _send(fd, ("result", func(report, *args, **kwargs)))
    except MemoryError as err:
        _send(fd, ("error", "builtins", "MemoryError", "out_of_memory",
                   f"ran out of memory (limit {limits.memory_bytes:,} bytes)" if limits.memory_bytes else
                   "ran out of memory", False, repr(err)))
    except BaseException as err:  # noqa: BLE001 - everything goes back to the parent
        try:
            _send(fd, _error_message(err))
        except BaseException:  # an unpicklable detail: at least the text
            code = 1
    finally:
        os._exit(code)  # never run the parent's atexit handlers, finalizers or test framework


def _rebuild(module: str, name: str, code: Optional[str], text: str, is_kiln: bool) -> BaseException:
    if is_kiln:
        try:
            cls = getattr(__import__(module, fromlist=[name]), name)
            err = cls.__new__(cls)
            Exception.__init__(err, text)
            err.message = text
            return err
        except (ImportError, AttributeError, TypeError):
            pass
    err = SandboxError(text if code == "out_of_memory" else f"{name}: {text}")
    if code == "out_of_memory":
        err.code = "out_of_memory"
    return err


class _Reader:
    """Length-prefixed pickled messages from the child's pipe."""

    def __init__(self, fd: int):
        self.fd, self.buffer = fd, b""

    def feed(self) -> bool:
        chunk = os.read(self.fd, 1 << 20)
        self.buffer += chunk
        return bool(chunk)

    def messages(self):
        while len(self.buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self.buffer)
            if len(self.buffer) < _HEADER.size + size:
                return
            data = self.buffer[_HEADER.size:_HEADER.size + size]
            self.buffer = self.buffer[_HEADER.size + size:]
            yield pickle.loads(data)


def _kill_group(pid: int) -> None:
    for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            kill()
        except (ProcessLookupError, PermissionError):
            pass


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        why = {"SIGXCPU": " (CPU time limit)", "SIGKILL": " (killed: memory or CPU limit?)"}.get(name, "")
        return f"crashed with {name}{why}"
    return f"exited with status {os.WEXITSTATUS(status)} without an answer"


def run_sandboxed(func: Callable[..., Any], *args, limits: Limits = Limits(),
                  on_message: Optional[Callable[..., None]] = None, what: str = "the sandboxed process",
                  **kwargs) -> Any:
    """`func(report, *args, **kwargs)` in a forked child under `limits`; its return value (picklable).

    The child may call `report(*message)`; each message reaches `on_message` in this process, which
    may raise to stop the child (it is killed). A KilnError raised in the child is raised here with
    its class and message; a crash, timeout or limit is a SandboxError naming `what`.
    """
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        os.close(read_fd)
        _child(write_fd, func, args, kwargs, limits)
    os.close(write_fd)
    reader, outcome = _Reader(read_fd), None
    deadline = time.monotonic() + limits.wall_s if limits.wall_s else None
    try:
        open_pipe = True
        while open_pipe and outcome is None:
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                raise SandboxTimeout(f"{what} did not finish within {limits.wall_s:g} s and was stopped")
            ready, _, _ = select.select([read_fd], [], [], wait)
            if not ready:
                continue
            open_pipe = reader.feed()
            for message in reader.messages():
                if message[0] == "message":
                    if on_message is not None:
                        on_message(*message[1])
                else:
                    outcome = message
    except BaseException:
        _kill_group(pid)
        raise
    finally:
        os.close(read_fd)
        if outcome is None:
            _kill_group(pid)
        _, status = os.waitpid(pid, 0)
    if outcome is None:
        raise SandboxError(f"{what} {_describe(status)}")
    if outcome[0] == "result":
        return outcome[1]
    raise _rebuild(*outcome[1:6])
