"""Child processes: `python -m` children that talk framed pickles, limits applied in them, killed with their group."""
from __future__ import annotations

import os
import time

import pytest

from core.process.child import ChildProcess, child_env
from core.process.limits import Limits

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_child_env_puts_the_repository_first_on_pythonpath(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    assert child_env()["PYTHONPATH"].split(os.pathsep) == [ROOT, "/elsewhere"]
    monkeypatch.delenv("PYTHONPATH")
    assert child_env()["PYTHONPATH"] == ROOT


@pytest.fixture
def echo_module(tmp_path, monkeypatch):
    """A `python -m` child that answers each request with its own limits, then obeys "exit" or "hang"."""
    (tmp_path / "kiln_echo_child.py").write_text(
        "import os, resource, sys, time\n"
        "from core.process.channel import messages, send, stdio_channel\n"
        "requests, answers = stdio_channel()\n"
        "for request in messages(requests):\n"
        "    print('noise on stdout')  # must not reach the parent's channel\n"
        "    if request == 'exit': os._exit(3)\n"
        "    if request == 'hang': time.sleep(60)\n"
        "    send(answers, (request, resource.getrlimit(resource.RLIMIT_AS)[0], resource.getrlimit(resource.RLIMIT_CORE)))\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return "kiln_echo_child"


def test_a_child_answers_under_its_limits_and_ends_when_its_stdin_closes(echo_module):
    child = ChildProcess(echo_module, Limits(memory_bytes=4 << 30, open_files=None))
    try:
        child.send({"x": 1})
        assert child.receive(time.monotonic() + 30) == ({"x": 1}, 4 << 30, (0, 0))
    finally:
        child.close()
    assert child.proc.returncode == 0


def test_a_dead_child_reads_as_eof_and_a_hung_one_as_a_timeout(echo_module):
    child = ChildProcess(echo_module)
    try:
        child.send("exit")
        with pytest.raises(EOFError):
            child.receive(time.monotonic() + 30)
        assert child.proc.wait() == 3
        with pytest.raises(OSError):  # BrokenPipeError: the build pool's sign of a dead process
            child.send("to nobody")
    finally:
        child.kill()
    child = ChildProcess(echo_module)
    try:
        child.send("hang")
        with pytest.raises(TimeoutError):
            child.receive(time.monotonic() + 0.5)
    finally:
        child.kill()
    assert child.proc.returncode == -9
