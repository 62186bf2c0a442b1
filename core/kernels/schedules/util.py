"""Schedule helpers: find the stages an op created (by tag), pick tile sizes that divide."""
from __future__ import annotations

from typing import Iterable, Optional, Sequence

from ...te.tensor import ComputeOp, Tensor


def find_ops(outs: Sequence[Tensor], tags: Iterable[str]) -> list[ComputeOp]:
    """Compute ops with one of `tags` reachable from `outs` (producer-first order, each once)."""
    wanted = set(tags)
    found: list[ComputeOp] = []
    seen: set[int] = set()

    def visit(t: Tensor) -> None:
        op = t.op
        if id(op) in seen or not isinstance(op, ComputeOp):
            return
        seen.add(id(op))
        for inp in op.input_tensors:
            visit(inp)
        if op.tag in wanted:
            found.append(op)

    for t in outs:
        visit(t)
    return found


def find_op(outs: Sequence[Tensor], tag: str) -> Optional[ComputeOp]:
    ops = find_ops(outs, [tag])
    return ops[-1] if ops else None


def inputs_tagged(op: ComputeOp, tag: str) -> list[ComputeOp]:
    return [t.op for t in op.input_tensors if isinstance(t.op, ComputeOp) and t.op.tag == tag]


def largest_divisor(n: int, candidates: Sequence[int]) -> Optional[int]:
    """The first of `candidates` (in the order given) that divides n."""
    for c in candidates:
        if c > 0 and n % c == 0:
            return c
    return None


def divisor_near(n: int, low: int, high: int) -> Optional[int]:
    """The largest divisor of n in [low, high], if any."""
    for d in range(min(high, n), max(low, 1) - 1, -1):
        if n % d == 0:
            return d
    return None
