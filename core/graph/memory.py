"""Static memory planning: intermediate buffers share one arena, reused once their value is dead.

Liveness is measured in kernel steps; buffers are placed largest-first at the lowest offset that
does not overlap any already placed buffer whose lifetime intersects (size-aware best fit).
"""
from __future__ import annotations

from dataclasses import dataclass

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


def plan_memory(lifetimes: list[Lifetime]) -> MemoryPlan:
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
