"""Runs a build tool (a C compiler, a linker, ptxas) as a child process, or starts one to run alongside this process:
its output, or BuildError with its messages."""
from __future__ import annotations

import errno
import os
import signal
import subprocess

from ..errors import BuildError

_STDERR_LINES = 12


def run_tool(cmd: list[str], what: str) -> subprocess.CompletedProcess:
    """Run a build tool; its completed process (output captured as text), or BuildError with its messages."""
    return start_tool(cmd, what).wait()


def start_tool(cmd: list[str], what: str) -> "RunningTool":
    """Start a build tool that runs while this process goes on; `wait()` then gives what run_tool gives."""
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as e:
        raise BuildError(f"{what} failed: cannot run {cmd[0]}: {e}") from None
    return RunningTool(proc, cmd, what)


class RunningTool:
    def __init__(self, proc: subprocess.Popen, cmd: list[str], what: str):
        self.proc, self.cmd, self.what = proc, cmd, what

    def wait(self) -> subprocess.CompletedProcess:
        """Its completed process once it ends (300 s at most from now), or BuildError with its messages."""
        cmd, what = self.cmd, self.what
        try:
            stdout, stderr = self.proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            raise BuildError(f"{what} failed: {cmd[0]} ran for more than 300 s") from None
        proc = subprocess.CompletedProcess(cmd, self.proc.returncode, stdout, stderr)
        if proc.returncode == -signal.SIGXFSZ or "File size limit exceeded" in (proc.stderr or ""):
            # The tool (or the compiler proper under gcc's driver) hit RLIMIT_FSIZE, a sandboxed job's file size
            # limit: a write that failed, as Python's own writes fail with EFBIG, not a toolchain fault.
            raise OSError(errno.EFBIG, f"{os.strerror(errno.EFBIG)}: {what} exceeded the file size limit")
        if proc.returncode != 0:
            lines = (proc.stderr or proc.stdout).strip().splitlines()[:_STDERR_LINES]
            raise BuildError(f"{what} failed ({os.path.basename(cmd[0])} exit {proc.returncode}): " + " | ".join(lines))
        return proc
