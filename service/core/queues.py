"""Queue names: compiles go to one queue; tuning measurements to one queue per device kind, so a worker
only measures on hardware it has (TVM's device pool, on Celery); jobs of a backend with a device queue
(cuda: `gpu`) to that queue, which workers with the device consume, so their artifacts are validated there.
A tuning job for another CPU family (an Arm preset on x86 hosts) compiles on the compile queue and sends its
candidates' measurements to `measure.<kind>` in batches (workers.measure_dispatch). Callers resolve the target
once (core.backends.resolve) and pass the Target with its Backend."""
from __future__ import annotations

from typing import Iterable, Optional, Sequence

from core.backends import Backend, all_backends, all_targets_with_backends
from core.backends.cuda import CudaBackend
from core.target import Target

COMPILE_QUEUE = "compile"
GPU_QUEUE = CudaBackend.device_queue  # what workers with an NVIDIA GPU consume


def device_kind(target: Target) -> str:
    """The kind of device that can measure code for `target`: the named target itself, or the host's."""
    if target.name != "native":
        return target.name
    kinds = host_device_kinds()
    return kinds[-1] if kinds else target.arch


def measure_queue(target: Target, backend: Backend) -> str:
    return backend.device_queue or f"measure.{device_kind(target)}"


def job_queue(target: Target, backend: Backend, trials: int) -> str:
    """Jobs of a backend with a device queue go there (tuned or not: validation runs the artifact); untuned
    CPU compiles run anywhere; a tuning job measures, so it goes to its device kind's queue, unless it
    measures remotely (then it compiles anywhere and only its measurements go there)."""
    if backend.device_queue:
        return backend.device_queue
    return (measure_queue(target, backend) if trials > 0 and not measured_remotely(target, backend, trials)
            else COMPILE_QUEUE)


def measured_remotely(target: Target, backend: Backend, trials: int) -> bool:
    """Whether a job tuning `trials` for `target` sends its measurements to measure.<kind> from the compile worker."""
    return trials > 0 and not backend.device_queue and backend.measures_remotely(target)


def untunable_reason(target: Target, spelled: str, measuring_kinds: Sequence[str], measurers: str) -> Optional[str]:
    """Why a compile for `target` (`spelled` as the user did) cannot be tuned where `measurers` ("no worker of this
    server", "this machine") measure only `measuring_kinds`; None when it can. The one rule the API (422) and
    `kiln compile` (exit 2) both apply before any work: a tuning run nothing can time would build untuned."""
    kind = device_kind(target)
    if kind in measuring_kinds:
        return None
    return (f"{measurers} can measure {kind} code, so target {spelled!r} cannot be tuned here "
            f"(tunable: {', '.join(measuring_kinds) or 'none'})")


def announced_measure_kinds(workers: Iterable[dict]) -> list[str]:
    """The device kinds that running workers (their beats: service.core.worker_beats) announce they measure: the
    kinds of their measure.<kind> queues (`kiln worker --measure KIND`, or an Arm host's own kinds)."""
    prefix = "measure."
    return sorted({q[len(prefix):] for w in workers for q in w.get("queues", ()) if q.startswith(prefix)})


def host_device_kinds() -> list[str]:
    """Named targets whose code runs on this machine (e.g. x86-64-v3 on an AVX2 host, v3 and v4 on AVX-512;
    cuda where an NVIDIA GPU is), found without initializing a device driver (Celery's pool and the
    compile sandbox are forked children)."""
    return [t.name for t, backend in all_targets_with_backends() if t.name != "native" and backend.has_device(t)]


def default_queues(with_gpu: bool = False) -> list[str]:
    """The compile queue and this machine's measure queues (device queues where the device is, or when
    asked: a single-machine service builds GPU artifacts without one, recording that validation was skipped)."""
    host = set(host_device_kinds())
    queues = [COMPILE_QUEUE] + [measure_queue(t, backend) for t, backend in all_targets_with_backends() if t.name in host]
    device_queues = [b.device_queue for b in all_backends() if b.device_queue] if with_gpu else []
    return queues + [q for q in device_queues if q not in queues]
