"""Child processes: the environment of a `python -m core...` child, a session of its own, its end."""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

from .channel import FrameReader, send
from .limits import Limits

_PR_SET_PDEATHSIG = 1


def child_env() -> dict:
    """This environment with the repository first on PYTHONPATH, for a `python -m core...` child."""
    root = str(Path(__file__).resolve().parents[2])
    return dict(os.environ, PYTHONPATH=os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Asks the kernel to send `sig` to this process when its parent dies (Linux; elsewhere nothing)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)
    except (OSError, AttributeError):
        pass


def kill_group(pid: int) -> None:
    """SIGKILL to the process group `pid` leads and to `pid` itself (in case it has no group of its own yet)."""
    for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            kill()
        except (ProcessLookupError, PermissionError):
            pass


class ChildProcess:
    """`python -m module` in a session of its own (a kill takes everything it started), under
    `limits` if given: framed pickles in on its stdin, out on its stdout, its stderr dropped.

    A plain subprocess rather than multiprocessing: the service compiles inside a daemonic sandbox
    process, which multiprocessing forbids to have children, and a spawned multiprocessing child
    would run the caller's main module again."""

    def __init__(self, module: str, limits: Optional[Limits] = None):
        self.proc = subprocess.Popen([sys.executable, "-m", module], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=child_env(), start_new_session=True,
                                     preexec_fn=limits.apply if limits is not None else None)
        self._reader = FrameReader(self.proc.stdout.fileno())

    def send(self, message: Any) -> None:
        """Raises OSError (BrokenPipeError) when the process is gone."""
        send(self.proc.stdin, message)

    def receive(self, deadline: Optional[float] = None) -> Any:
        """The next answer; EOFError if the process ended, TimeoutError past `deadline` (time.monotonic())."""
        return self._reader.next(deadline)

    def kill(self) -> None:
        """Ends it at once (a crashed, hung or unwanted process), with anything it started."""
        if self.proc.poll() is None:  # once reaped, its pid may be someone else's
            kill_group(self.proc.pid)
        self.close()

    def close(self) -> None:
        """Closes its pipes (its stdin at end: a well-behaved child exits) and waits for it."""
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
