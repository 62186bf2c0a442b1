"""Runs a build tool (a C compiler, a linker, ptxas) as a child process: its output, or BuildError with its messages."""
from __future__ import annotations

import errno
import os
import signal
import subprocess

from ..errors import BuildError

_STDERR_LINES = 12


def run_tool(cmd: list[str], what: str) -> subprocess.CompletedProcess:
    """Run a build tool; its completed process (output captured as text), or BuildError with its messages."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except OSError as e:
        raise BuildError(f"{what} failed: cannot run {cmd[0]}: {e}") from None
    except subprocess.TimeoutExpired:
        raise BuildError(f"{what} failed: {cmd[0]} ran for more than 300 s") from None
    if proc.returncode == -signal.SIGXFSZ or "File size limit exceeded" in (proc.stderr or ""):
        # The tool (or the compiler proper under gcc's driver) hit RLIMIT_FSIZE, a sandboxed job's file size
        # limit: a write that failed, as Python's own writes fail with EFBIG, not a toolchain fault.
        raise OSError(errno.EFBIG, f"{os.strerror(errno.EFBIG)}: {what} exceeded the file size limit")
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()[:_STDERR_LINES]
        raise BuildError(f"{what} failed ({os.path.basename(cmd[0])} exit {proc.returncode}): " + " | ".join(lines))
    return proc
