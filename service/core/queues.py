"""Queue names: compiles go to one queue; tuning measurements to one queue per device kind, so a worker
only measures on hardware it has (TVM's device pool, on Celery); GPU (cuda) jobs to the `gpu` queue,
which workers with an NVIDIA GPU consume, so their artifacts are validated on the GPU."""
from __future__ import annotations

import glob

from core.target import Target, all_targets, get_target

COMPILE_QUEUE = "compile"
GPU_QUEUE = "gpu"


def device_kind(target: "str | Target") -> str:
    """The kind of device that can measure code for `target`: the named target itself, or the host's."""
    tgt = get_target(target)
    if tgt.name != "native":
        return tgt.name
    kinds = host_device_kinds()
    return kinds[-1] if kinds else tgt.arch


def measure_queue(target: "str | Target") -> str:
    return GPU_QUEUE if get_target(target).kind == "cuda" else f"measure.{device_kind(target)}"


def job_queue(target: str, trials: int) -> str:
    """GPU jobs go to the GPU queue (tuned or not: validation runs the artifact); untuned CPU compiles run
    anywhere; a tuning job measures, so it goes to its device kind's queue."""
    if get_target(target).kind == "cuda":
        return GPU_QUEUE
    return measure_queue(target) if trials > 0 else COMPILE_QUEUE


def has_nvidia_gpu() -> bool:
    """An NVIDIA GPU and its driver here, found without initializing CUDA: a process that called cuInit
    cannot use CUDA in the children it forks (Celery's pool, the compile sandbox)."""
    from core.runtime.loader import _cuda_driver

    return bool(glob.glob("/dev/nvidia[0-9]*")) and _cuda_driver() is not None


def host_device_kinds() -> list[str]:
    """Named targets whose code runs on this machine (e.g. x86-64-v3 on an AVX2 host, v3 and v4 on AVX-512;
    cuda where an NVIDIA GPU is)."""
    kinds = [t.name for t in all_targets() if t.name != "native" and t.runs_on_host()]
    return kinds + (["cuda"] if has_nvidia_gpu() else [])


def default_queues(with_gpu: bool = False) -> list[str]:
    """The compile queue and this machine's measure queues (the GPU queue where a GPU is, or when asked:
    a single-machine service builds GPU artifacts without one, recording that validation was skipped)."""
    queues = [COMPILE_QUEUE] + [measure_queue(kind) for kind in host_device_kinds()]
    return queues + ([GPU_QUEUE] if with_gpu and GPU_QUEUE not in queues else [])
