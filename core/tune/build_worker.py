"""A build process (run as `python -m core.tune.build_worker`) and its handle: builds the candidates
it is sent, one at a time, so a LocalBuilder can build a batch on several cores.

A plain subprocess rather than multiprocessing: the service compiles inside a daemonic sandbox
process, which multiprocessing forbids to have children, and a spawned multiprocessing child would
run the caller's main module again. Requests and answers are pickles, each after its 8-byte length.
"""
from __future__ import annotations

import os
import pickle
import signal
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any, BinaryIO, Optional

_LENGTH = struct.Struct("<Q")


def _write(stream: BinaryIO, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def _read(stream: BinaryIO) -> Optional[Any]:
    """The next pickle, or None at the end of the stream (the other side is gone)."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (size,) = _LENGTH.unpack(head)
    data = stream.read(size)
    return pickle.loads(data) if len(data) == size else None


def child_env() -> dict:
    """This environment with the repository first on PYTHONPATH, for a `python -m core...` child."""
    root = str(Path(__file__).resolve().parents[2])
    return dict(os.environ, PYTHONPATH=os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))


class BuildProcess:
    """One build process: `submit` a (task, config, directory), then `result` its BuildResult."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-m", "core.tune.build_worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=child_env(),
                                     start_new_session=True)

    def submit(self, task, config, directory) -> bool:
        """False when the process is gone (its pipe is closed)."""
        try:
            _write(self.proc.stdin, (task, config, str(directory)))
            return True
        except (BrokenPipeError, OSError):
            return False

    def result(self):
        """The BuildResult of the last request, or None if the process died building it."""
        return _read(self.proc.stdout)

    def kill(self) -> None:
        """Ends it at once (a hung or dead build), with anything it started."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.close()

    def close(self) -> None:
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


def main() -> None:
    from .measure import build_candidate

    stdin = sys.stdin.buffer
    stdout = os.fdopen(os.dup(1), "wb")  # the answers' own channel: what the compiler prints (DEBUG=N)
    os.dup2(2, 1)  # goes where stderr goes instead
    while (request := _read(stdin)) is not None:
        task, config, directory = request
        _write(stdout, build_candidate(task, config, directory))


if __name__ == "__main__":
    main()
