"""Pad whose input has run-time lengths or whose pads are computed at run time (an image padded up to a
multiple of 32 from its run-time sides): constant padding at the end of an axis.

The buffer grows to the largest padded size; what lies between the input's length and the padded length is
the fill (a mask against the input's length, core/graph/bounded.py), and the output is bounded by that padded
length, computed at run time. When a pad is `target - length` of the same length it pads, the padded length
is `target` itself, whose largest value is exact (no sum of two largest values), even where the pad is negative
(a crop: the target is then below the length, and the input's own entries fill it)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from core.graph.bounded import Bound, arithmetic, combined, masked, parts_of
from core.graph.run_time_entries import entry_sources, extremes, int_length, same_length

from .registry import ConvertContext


def pads_at_run_time(ctx: ConvertContext, pads: Optional[str], axes: Optional[list[int]]) -> bool:
    """Whether the pads are computed at run time, or pad a run-time length at its end only (other pads of a
    bounded input go to its bound rule, core/graph/bound_rules.py)."""
    b = ctx.builder
    if pads is None:
        return False
    constant = b.constant_value(pads)
    if constant is None:
        return True
    rank = ctx.type_of(0).rank
    axes = list(range(rank)) if axes is None else axes
    given = [int(v) for v in constant.reshape(-1)]
    if len(given) != 2 * len(axes):
        return False
    ends = {axis: (given[k], given[k + len(axes)]) for k, axis in enumerate(axes)}
    padded = [ends.get(p.axis, (0, 0)) for p in parts_of(b.bounds.get(ctx.input(0)))]
    return bool(padded) and any(end for _, end in padded) and not any(begin for begin, _ in padded)


def pad_at_run_time(ctx: ConvertContext, pads: str, fill: float, mode: str, axes: Optional[list[int]]) -> str:
    b = ctx.builder
    x = ctx.input(0)
    xtype = b.type_of(x)
    rank = xtype.rank
    if mode != "constant":
        ctx.unsupported(f"{mode} padding over run-time sizes (constant padding is taken)")
    axes = list(range(rank)) if axes is None else axes
    constant = b.constant_value(pads)
    if constant is not None:
        sources: list = [int(v) for v in constant.reshape(-1)]
    else:
        if pads not in b.runtime_ints:
            ctx.fail("its pads are computed at run time in a way whose largest value Kiln cannot tell")
        sources = entry_sources(b, pads) or ctx.fail("its pads are built at run time in a way Kiln does not follow")
    if len(sources) != 2 * len(axes):
        ctx.fail(f"pads need two values per padded axis {axes}, got {len(sources)}")
    lengths = {p.axis: p.length for p in parts_of(b.bounds.get(x))}
    begins, ends = [0] * rank, [0] * rank
    run_time_ends: dict[int, str] = {}
    for k, axis in enumerate(axes):
        begin, end = (_static(b, s) for s in (sources[k], sources[k + len(axes)]))
        if begin is None or (begin and (axis in lengths or end is None)):
            ctx.unsupported("padding at the start of an axis with a run-time length (padding at its end is taken)")
        begins[axis] = begin
        if end is not None:
            ends[axis] = end
        else:
            run_time_ends[axis] = sources[k + len(axes)]
    shape = list(xtype.shape)
    out_parts, grown = [], list(ends)
    for axis in range(rank):
        in_len, end = lengths.get(axis), run_time_ends.get(axis)
        if in_len is None and end is None:
            continue
        out_len, largest = _padded_length(ctx, axis, shape[axis], in_len, end, ends[axis])
        grown[axis] = largest - shape[axis] - begins[axis]
        if grown[axis] < 0:
            ctx.fail(f"axis {axis} would shrink at run time (a negative pad)")
        out_parts.append(Bound(out_len, axis))
    value = x
    if any(begins) or any(grown):
        value = b.add_unbounded_node("Pad", [x], 1, ctx.hint, pads=tuple(begins + grown), mode="constant",
                                     value=fill)[0]
    for axis in sorted(set(lengths) | set(run_time_ends)):
        if axis in lengths:  # the input's own padding past its length becomes the fill
            value = masked(b, value, fill, Bound(lengths[axis], axis))
    out = b.add_unbounded_node("Identity", [value], 1, ctx.hint)[0]
    bound = combined(out_parts)
    if bound is not None:
        b.bounds[out] = bound
    return out


def _static(b, source) -> Optional[int]:
    if isinstance(source, int):
        return source
    low, high = extremes(b, source)
    return int(high) if low is not None and low == high else None


def _padded_length(ctx: ConvertContext, axis: int, dim: int, in_len: Optional[str], end: Optional[str],
                   static_end: int) -> tuple[str, int]:
    """(the padded length as an int64 [1] value, its largest value) along one axis."""
    b = ctx.builder
    if end is None:  # a static pad after a run-time length
        largest = dim + static_end
        length = arithmetic(b, "Add", in_len, b.add_constant(np.array([static_end], np.int64), "length"))
        b.runtime_ints[length] = np.array([largest], np.int64)
        return length, largest
    node = b.producer(same_length(b, end))
    own = same_length(b, in_len) if in_len is not None else None
    if node is not None and node.op == "Sub" and own is not None and same_length(b, node.inputs[1]) == own:
        target = node.inputs[0]  # length + (target - length): the target itself
        t_low, t_high = extremes(b, target)
        if t_high is not None:
            return int_length(b, target, int(t_high)), int(t_high)
    low, high = extremes(b, end)
    if low is None or high is None or low < 0:
        ctx.fail(f"the run-time pad of axis {axis} may be negative or has no known largest value")
    base = in_len if in_len is not None else b.add_constant(np.array([dim], np.int64), "length")
    largest = dim + int(high)
    length = arithmetic(b, "Add", base, int_length(b, end, int(high)))
    b.runtime_ints[length] = np.array([largest], np.int64)
    return length, largest


__all__ = ["pads_at_run_time", "pad_at_run_time"]
