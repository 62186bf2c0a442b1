"""Kernel registries: per graph op, one compute (what) and per target kind a default schedule (how).

The graph executor looks ops up here; ops without a dedicated schedule get the generic one that
matches their fusion Pattern (injective or reduction).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from ..errors import KilnError
from ..graph.ir import TensorType
from ..graph.ops import Pattern
from ..target import Target
from ..te.schedule import Schedule
from ..te.tensor import Tensor
from .schedules.generic import schedule_injective, schedule_reduce

ComputeFn = Callable[[list[Optional[Tensor]], Mapping[str, Any], list[TensorType]], list[Tensor]]
ScheduleFn = Callable[[Schedule, list[Tensor], Target], None]


class MissingKernelError(KilnError):
    """No compute (or schedule) is registered for a graph op: the op cannot be compiled."""

    code = "unsupported_op"


_COMPUTES: dict[str, ComputeFn] = {}
_SCHEDULES: dict[tuple[str, str], ScheduleFn] = {}


def register_compute(op: str) -> Callable[[ComputeFn], ComputeFn]:
    def wrap(fn: ComputeFn) -> ComputeFn:
        if op in _COMPUTES:
            raise ValueError(f"compute for {op} registered twice")
        _COMPUTES[op] = fn
        return fn

    return wrap


def register_schedule(op: str, target_kind: str = "cpu") -> Callable[[ScheduleFn], ScheduleFn]:
    def wrap(fn: ScheduleFn) -> ScheduleFn:
        if (op, target_kind) in _SCHEDULES:
            raise ValueError(f"schedule for {op} on {target_kind} registered twice")
        _SCHEDULES[(op, target_kind)] = fn
        return fn

    return wrap


def get_compute(op: str) -> ComputeFn:
    _load()
    try:
        return _COMPUTES[op]
    except KeyError:
        raise MissingKernelError(f"no kernel compute is registered for op {op}") from None


def get_schedule(op: str, target: Target) -> ScheduleFn:
    """The op's schedule for `target.kind`, else the generic schedule of the op's fusion pattern."""
    _load()
    fn = _SCHEDULES.get((op, target.kind))
    if fn is not None:
        return fn
    if target.kind != "cpu":
        raise MissingKernelError(f"no {target.kind} schedule is registered for op {op}")
    from ..graph.ops import get_op

    try:
        pattern = get_op(op).pattern
    except KeyError:
        pattern = Pattern.INJECTIVE  # an op unknown to the graph registry still gets a safe loop nest
    return schedule_reduce if pattern >= Pattern.REDUCTION else schedule_injective


def registered_ops() -> list[str]:
    _load()
    return sorted(_COMPUTES)


def _load() -> None:
    # Importing the op modules registers every compute and schedule exactly once.
    from . import ops  # noqa: F401


__all__ = ["ComputeFn", "ScheduleFn", "MissingKernelError", "register_compute", "register_schedule", "get_compute",
           "get_schedule", "registered_ops", "schedule_injective", "schedule_reduce"]
