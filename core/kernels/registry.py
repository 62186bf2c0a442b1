"""Kernel registries: per graph op, one compute (what) and per target kind a default schedule (how).

The graph executor looks ops up here; ops without a dedicated schedule get the generic one (injective or
reduction, by their fusion Pattern) that the caller passes: its target's Backend's (Backend.schedule). The op
modules register into these tables when core/kernels/__init__ imports them (kernels/ops.py), before anything can
look an op up.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from ..errors import KilnError
from ..graph.ir import TensorType
from ..graph.ops import Pattern
from ..target import CPU_KIND, Target
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


# Per target kind, computes that replace the default one (a GPU conv without the CPU's widened rows).
_KIND_COMPUTES: dict[tuple[str, str], ComputeFn] = {}


def register_compute(op: str, target_kind: Optional[str] = None) -> Callable[[ComputeFn], ComputeFn]:
    """The op's compute; with `target_kind`, the one used instead on targets of that kind."""
    def wrap(fn: ComputeFn) -> ComputeFn:
        table, key = (_COMPUTES, op) if target_kind is None else (_KIND_COMPUTES, (op, target_kind))
        if key in table:
            raise ValueError(f"compute for {op} ({target_kind or 'default'}) registered twice")
        table[key] = fn  # type: ignore[index]
        return fn

    return wrap


def register_schedule(op: str, target_kind: str = CPU_KIND) -> Callable[[ScheduleFn], ScheduleFn]:
    def wrap(fn: ScheduleFn) -> ScheduleFn:
        if (op, target_kind) in _SCHEDULES:
            raise ValueError(f"schedule for {op} on {target_kind} registered twice")
        _SCHEDULES[(op, target_kind)] = fn
        return fn

    return wrap


def get_compute(op: str, target_kind: str = CPU_KIND) -> ComputeFn:
    """The op's compute for targets of `target_kind` (its own one if registered, else the default)."""
    override = _KIND_COMPUTES.get((op, target_kind))
    if override is not None:
        return override
    try:
        return _COMPUTES[op]
    except KeyError:
        raise MissingKernelError(f"no kernel compute is registered for op {op}") from None


def get_schedule(op: str, target: Target,
                 generic: Optional[tuple[ScheduleFn, ScheduleFn]] = None) -> ScheduleFn:
    """The op's schedule for `target.kind`, else the `generic` (injective, reduction) schedule of the op's fusion
    pattern (its Backend's fallback_schedules, handed down by the caller); without them, MissingKernelError."""
    fn = _SCHEDULES.get((op, target.kind))
    if fn is not None:
        return fn
    if generic is None:
        raise MissingKernelError(f"no {target.kind} schedule is registered for op {op}")
    injective, reduction = generic
    from ..graph.ops import get_op

    try:
        pattern = get_op(op).pattern
    except KeyError:
        pattern = Pattern.INJECTIVE  # an op unknown to the graph registry still gets a safe loop nest
    return reduction if pattern >= Pattern.REDUCTION else injective


def registered_ops() -> list[str]:
    return sorted(_COMPUTES)


__all__ = ["ComputeFn", "ScheduleFn", "MissingKernelError", "register_compute", "register_schedule",
           "get_compute",
           "get_schedule", "registered_ops", "schedule_injective", "schedule_reduce"]
