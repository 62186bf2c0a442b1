"""Per-op kernels: compute definitions (what) and default schedules per target (how), in registries."""
from .registry import (MissingKernelError, get_compute, get_schedule, register_compute, register_schedule,
                       registered_ops, schedule_injective, schedule_reduce)
from . import ops  # noqa: F401,E402 (registers every op's compute and schedules: the registry never imports them)

__all__ = ["MissingKernelError", "get_compute", "get_schedule", "register_compute", "register_schedule",
           "registered_ops", "schedule_injective", "schedule_reduce"]
