"""run_sandboxed: a result or a KilnError comes back whole, messages reach the parent as they are sent,
and a crash, a timeout or the memory limit is a SandboxError while the caller carries on."""
from __future__ import annotations

import faulthandler
import os
import signal
import time

import pytest

from core.errors import InvalidModelError
from core.process.limits import Limits
from core.process.sandbox import SandboxError, SandboxTimeout, run_sandboxed


def _steps(report, n: int) -> list:
    for k in range(n):
        report("step", k)
    return [k * k for k in range(n)]


def test_result_and_messages_come_back():
    seen = []
    assert run_sandboxed(_steps, 3, on_message=lambda *m: seen.append(m)) == [0, 1, 4]
    assert seen == [("step", 0), ("step", 1), ("step", 2)]


def _bad_model(report):
    raise InvalidModelError("not an ONNX model")


def test_a_kiln_error_keeps_its_class_and_message():
    with pytest.raises(InvalidModelError, match="not an ONNX model") as info:
        run_sandboxed(_bad_model)
    assert info.value.code == "invalid_model"


def _crash(report):
    faulthandler.disable()  # pytest's handler would print the child's stack
    os.kill(os.getpid(), signal.SIGSEGV)


def _hang(report):
    report("started")
    time.sleep(60)


def _allocate(report):
    return len(bytearray(1 << 30))


def test_a_crash_a_timeout_and_the_memory_limit_are_sandbox_errors():
    with pytest.raises(SandboxError, match="the check crashed with SIGSEGV"):
        run_sandboxed(_crash, what="the check")
    start = time.monotonic()
    with pytest.raises(SandboxTimeout, match="did not finish within 0.5 s"):
        run_sandboxed(_hang, limits=Limits(wall_s=0.5))
    assert time.monotonic() - start < 10
    with pytest.raises(SandboxError, match="ran out of memory") as info:
        run_sandboxed(_allocate, limits=Limits(memory_bytes=512 << 20))
    assert info.value.code == "out_of_memory"


class _Stop(Exception):
    pass


def test_a_message_handler_that_raises_stops_the_child():
    def stop(*message):
        raise _Stop()

    start = time.monotonic()
    with pytest.raises(_Stop):
        run_sandboxed(_hang, on_message=stop)
    assert time.monotonic() - start < 10
