"""Limits.apply: each limit set in the child, capped at the inherited hard limit; RLIMIT_CPU keeps its hard limit."""
from __future__ import annotations

import json
import os
import resource

from core.process.limits import Limits


def _limits_in_a_child(limits: Limits, nofile_hard: int) -> dict:
    """The limits a forked child has after lowering its RLIMIT_NOFILE hard limit, then applying `limits`."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (64, nofile_hard))
            limits.apply()
            names = ("RLIMIT_NOFILE", "RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_CORE")
            os.write(write_fd, json.dumps({n: resource.getrlimit(getattr(resource, n)) for n in names}).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    return {name: tuple(value) for name, value in json.loads(text).items()}


def test_limits_are_set_and_capped_at_the_hard_limit():
    got = _limits_in_a_child(Limits(cpu_s=100, memory_bytes=6 << 30, open_files=1000), nofile_hard=128)
    assert got["RLIMIT_NOFILE"] == (128, 128)  # asked for more than the hard limit: the hard limit
    assert got["RLIMIT_AS"] == (6 << 30, 6 << 30)
    assert got["RLIMIT_CPU"] == (100, resource.getrlimit(resource.RLIMIT_CPU)[1])  # SIGXCPU at the soft limit
    assert got["RLIMIT_CORE"] == (0, 0)


def test_none_leaves_a_limit_as_inherited_but_core_files_are_always_off():
    inherited_as = resource.getrlimit(resource.RLIMIT_AS)
    got = _limits_in_a_child(Limits(open_files=None), nofile_hard=128)
    assert got["RLIMIT_NOFILE"] == (64, 128) and got["RLIMIT_AS"] == inherited_as
    assert got["RLIMIT_CORE"] == (0, 0)
