"""Static memory planning: intermediate buffers share one arena, reused once their value is dead.

Liveness is measured in kernel steps; buffers are placed largest-first at the lowest offset that
does not overlap any already placed buffer whose lifetime intersects (size-aware best fit). A value
computed in place of another (an elementwise kernel overwriting an input that dies there) shares
that input's buffer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

ALIGNMENT = 64  # bytes: a cache line, and an AVX-512 register


def align(n: int, to: int = ALIGNMENT) -> int:
    return (n + to - 1) // to * to


@dataclass(frozen=True)
class Lifetime:
    """A buffer of `size` bytes that must stay intact from step `start` through step `end`."""

    name: str
    size: int
    start: int
    end: int


@dataclass(frozen=True)
class MemoryPlan:
    offsets: dict[str, int]
    arena_bytes: int
    naive_bytes: int  # what one buffer per value would take


def plan_memory(lifetimes: list[Lifetime], inplace: Optional[Mapping[str, str]] = None) -> MemoryPlan:
    """Offsets for every lifetime; `inplace` maps a value to the value whose buffer it reuses (that
    value must end where this one starts, and be at least as large)."""
    naive = sum(align(max(lt.size, 1)) for lt in lifetimes)
    inplace = dict(inplace or {})

    def root(name: str) -> str:
        while name in inplace:
            name = inplace[name]
        return name

    merged: dict[str, Lifetime] = {}
    for lt in lifetimes:
        r = root(lt.name)
        old = merged.get(r)
        merged[r] = lt if old is None else Lifetime(r, max(old.size, lt.size), min(old.start, lt.start),
                                                    max(old.end, lt.end))
    plan = _place(list(merged.values()))
    offsets = {lt.name: plan.offsets[root(lt.name)] for lt in lifetimes}
    return MemoryPlan(offsets, plan.arena_bytes, naive)


def _place(lifetimes: list[Lifetime]) -> MemoryPlan:
    placed: list[tuple[int, int, Lifetime]] = []  # (offset, end offset, lifetime)
    offsets: dict[str, int] = {}
    for lt in sorted(lifetimes, key=lambda x: (-x.size, x.start, x.name)):
        size = align(max(lt.size, 1))
        conflicts = sorted((off, end) for off, end, other in placed if other.start <= lt.end and lt.start <= other.end)
        offset = 0
        for off, end in conflicts:  # first gap large enough, scanning upward
            if offset + size <= off:
                break
            offset = max(offset, end)
        offsets[lt.name] = offset
        placed.append((offset, offset + size, lt))
    arena = max((end for _, end, _ in placed), default=0)
    naive = sum(align(max(lt.size, 1)) for lt in lifetimes)
    return MemoryPlan(offsets, arena, naive)
