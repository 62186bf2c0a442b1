"""Runs a function in a forked child with resource limits, so a crash, hang or runaway in it costs only the child.

For code Kiln generated and now executes (validation, benchmarks, the tuner's measurements): a
segfault, an infinite loop, a huge allocation or an endless write fails that call with a
SandboxError; the calling process (an API or a Celery worker) carries on.
"""
from __future__ import annotations

import os
import signal
import time
import traceback
from typing import Any, Callable, Optional

from ..errors import KilnError
from .channel import FrameReader, send
from .child import die_with_parent, kill_group
from .limits import Limits


class SandboxError(KilnError):
    """The sandboxed child crashed, ran out of time, or hit a resource limit."""

    code = "sandbox_failed"


class SandboxTimeout(SandboxError):
    code = "timeout"


def _enter(limits: Limits) -> None:
    os.setsid()  # its own session and process group: a timeout kills everything it started
    die_with_parent()  # a worker killed by its time limit must not leave a compile running
    # A write past RLIMIT_FSIZE raises SIGXFSZ, which kills by default; ignored, the write fails with EFBIG.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limits.apply()


def error_message(err: BaseException) -> tuple:
    # KilnError subclasses take different constructor arguments: send class, code and text, not the object.
    return ("error", type(err).__module__, type(err).__qualname__, getattr(err, "code", None), str(err),
            isinstance(err, KilnError), traceback.format_exc(limit=20))


def _child(fd: int, func: Callable, args: tuple, kwargs: dict, limits: Limits) -> None:
    code, channel = 0, os.fdopen(fd, "wb")
    try:
        _enter(limits)
        report = lambda *message: send(channel, ("message", message))  # noqa: E731
        send(channel, ("result", func(report, *args, **kwargs)))
    except MemoryError as err:
        send(channel, ("error", "builtins", "MemoryError", "out_of_memory",
                       f"ran out of memory (limit {limits.memory_bytes:,} bytes)" if limits.memory_bytes else
                       "ran out of memory", False, repr(err)))
    except BaseException as err:  # noqa: BLE001 - everything goes back to the parent
        try:
            send(channel, error_message(err))
        except BaseException:  # an unpicklable detail: at least the text
            code = 1
    finally:
        os._exit(code)  # never run the parent's atexit handlers, finalizers or test framework


def rebuild_error(module: str, name: str, code: Optional[str], text: str, is_kiln: bool) -> BaseException:
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
    reader, outcome = FrameReader(read_fd), None
    deadline = time.monotonic() + limits.wall_s if limits.wall_s else None
    try:
        while outcome is None:
            try:
                message = reader.next(deadline)
            except TimeoutError:
                raise SandboxTimeout(f"{what} did not finish within {limits.wall_s:g} s and was stopped") from None
            except EOFError:
                break
            if message[0] != "message":
                outcome = message
            elif on_message is not None:
                on_message(*message[1])
    except BaseException:
        kill_group(pid)
        raise
    finally:
        os.close(read_fd)
        if outcome is None:
            kill_group(pid)
        _, status = os.waitpid(pid, 0)
    if outcome is None:
        raise SandboxError(f"{what} {_describe(status)}")
    if outcome[0] == "result":
        return outcome[1]
    raise rebuild_error(*outcome[1:6])
