"""Kernel arguments laid out at run-time lengths: the caller's compact arrays, addressed with strides that read the
lengths (Schedule.run_time_layouts; core/lowering/run_time_layouts.py says which)."""
from __future__ import annotations

import functools
from typing import Sequence

from ..errors import ScheduleError
from ..tir.expr import Buffer, Expr, as_expr, binop, cast, logical_and, select


class RunTimeLayoutError(ScheduleError):
    """A kernel argument laid out at run-time lengths (Schedule.run_time_layouts) reached a nest that addresses it
    other than by plain loads and guarded stores (a reduction or epilogue writing it, a store along a vector loop,
    a tensorized or hand-built nest): the caller compiles that argument at its static layout instead."""


class LayoutAddressing:
    """The lowering's addressing of its arguments laid out at run-time lengths (mixed into core/te/lower.py's
    _Lowering, whose `buffers`, `expand` and `address` it uses)."""

    def init_layouts(self, sch, args) -> None:
        # buffer -> axis -> the length (a te read of a length input, expanded when first used)
        self.laid_out = {self.buffers[id(t.op)]: t.op for t in args if id(t.op) in sch.run_time_layouts}
        self.layouts: dict[Buffer, dict[int, Expr]] = {buf: dict(sch.run_time_layouts[id(op)])
                                                       for buf, op in self.laid_out.items()}
        self._layout_loads: dict[Buffer, dict[int, Expr]] = {}

    def layout(self, buf: Buffer) -> dict[int, Expr]:
        """Axis -> run-time length (a Load) of an argument laid out at its run-time lengths; empty for others."""
        if buf not in self.layouts:
            return {}
        if buf not in self._layout_loads:
            self._layout_loads[buf] = {axis: self.expand(n) for axis, n in self.layouts[buf].items()}
        return self._layout_loads[buf]

    def layout_load(self, buf: Buffer, indices: Sequence[Expr]) -> Expr:
        """A read of an argument laid out at run-time lengths: 0 past a length along its axis (what the padded
        copy held there). The load is a select's arm, which codegen never speculates (core/codegen/analysis.py
        may_trap: a branch, or a lane mask), so a point past the caller's array is never read."""
        return select(functools.reduce(logical_and, self.layout_guards(buf, indices)),
                      buf.load(self.address(buf, indices)), as_expr(0, buf.dtype))

    def layout_guards(self, buf: Buffer, indices: Sequence[Expr]) -> list[Expr]:
        """The conditions under which a point of `buf` lies inside its run-time lengths (where a store may go)."""
        return [binop("lt", as_expr(indices[axis]), cast(as_expr(indices[axis]).dtype, length))
                for axis, length in self.layout(buf).items()]

    def refuse_layout(self, bufs: Sequence[Buffer], why: str) -> None:
        laid_out = [b.name for b in bufs if b in self.layouts]
        if laid_out:
            raise RunTimeLayoutError(f"{', '.join(laid_out)}: laid out at run-time lengths, but {why}")


__all__ = ["LayoutAddressing", "RunTimeLayoutError"]
