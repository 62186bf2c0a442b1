"""Queue names: compiles go to one queue; tuning measurements to one queue per device kind, so a worker
only measures on hardware it has (TVM's device pool, on Celery)."""
from __future__ import annotations

from core.target import Target, all_targets, get_target

COMPILE_QUEUE = "compile"


def device_kind(target: "str | Target") -> str:
    """The kind of device that can measure code for `target`: the named target itself, or the host's."""
    tgt = get_target(target)
    if tgt.name != "native":
        return tgt.name
    kinds = host_device_kinds()
    return kinds[-1] if kinds else tgt.arch


def measure_queue(target: "str | Target") -> str:
    return f"measure.{device_kind(target)}"


def job_queue(target: str, trials: int) -> str:
    """Untuned compiles run anywhere; a tuning job measures, so it goes to its device kind's queue."""
    return measure_queue(target) if trials > 0 else COMPILE_QUEUE


def host_device_kinds() -> list[str]:
    """Named targets whose code runs on this machine (e.g. x86-64-v3 on an AVX2 host, v3 and v4 on AVX-512)."""
    return [t.name for t in all_targets() if t.name != "native" and t.runs_on_host()]


def default_queues() -> list[str]:
    return [COMPILE_QUEUE] + [f"measure.{kind}" for kind in host_device_kinds()]
