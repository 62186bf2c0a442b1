"""The `tensorize` primitive (TVM's tensorize, from the OSDI'18 paper): a loop nest as one tensor intrinsic's call.

An intrinsic is declared once, as a small compute over placeholders (what one hardware instruction
computes: `c[16] += sum_{k<4} int32(a[k]) * int32(b[16, 4])`, or a conversion `c[16] = bfloat16(a[16])`),
with the target features it needs (core/te/intrinsics.py; its lowering is codegen's, core/codegen/intrinsics*.py).
`Stage.tensorize(axis, intrinsic)` marks a loop; lowering then checks that the loop nest from that
loop down computes exactly the declaration (loop extents and kinds, the update, the operand dtypes,
and each operand's strides over the loops: a dense region laid out as the placeholder's shape) and
replaces it with one IntrinsicCall on the regions' first elements, or says what does not match.
"""
from __future__ import annotations

import itertools
import random
from typing import Sequence

from ..errors import ScheduleError
from ..tir.expr import BinOp, Cast, Expr, IntImm, Load, Var
from ..tir.functor import substitute, walk_expr
from ..tir.simplify import simplify
from ..tir.stmt import For, IntrinsicCall, Stmt, Store
from .intrinsics import TensorIntrinsic
from .tensor import PlaceholderOp, Reduce, TensorRead


class TensorizeError(ScheduleError):
    """A loop nest does not compute what the tensor intrinsic it was tensorized with declares."""

    code = "tensorize_mismatch"


def tensorize_nest(loop: For, kinds: Sequence[str], intrinsic: TensorIntrinsic) -> Stmt:
    """`loop` (the tensorized loop, whose nest's leaves have `kinds`) as one call of `intrinsic`."""
    op = intrinsic.op
    axes = list(op.axis) + list(op.reduce_axis)
    where = f"tensorize({loop.var.name}, {intrinsic.name})"
    loops: list[For] = []
    body: Stmt = loop
    while isinstance(body, For):
        loops.append(body)
        body = body.body
    if not isinstance(body, Store):
        raise TensorizeError(f"{where}: the loop nest holds {type(body).__name__}, not one update (a guard from a "
                             "split that does not divide, or a stage computed inside it)")
    extents = [l.extent.value if isinstance(l.extent, IntImm) else None for l in loops]
    declared = [iv.extent for iv in axes]
    if extents != declared or list(kinds) != [iv.kind for iv in axes]:
        raise TensorizeError(f"{where}: the loops below have extents {extents} ({', '.join(kinds)}); the intrinsic "
                             f"declares {declared} ({', '.join(iv.kind for iv in axes)})")
    value = body.value
    update = None if isinstance(op.body, Reduce) else value  # an elementwise declaration: c = f(a)
    if isinstance(op.body, Reduce) and isinstance(value, BinOp) and value.op == "add":
        for acc, src in ((value.a, value.b), (value.b, value.a)):
            if isinstance(acc, Load) and acc.buffer is body.buffer and acc.index == body.index:
                update = src
    if update is None:
        raise TensorizeError(f"{where}: the nest does not accumulate into {body.buffer.name} (c = c + ...)")
    reads: list[tuple[TensorRead, Load]] = []
    _match(update, op.body.source if isinstance(op.body, Reduce) else op.body, reads, where)
    if body.buffer.dtype != op.dtype:
        raise TensorizeError(f"{where}: the output is {body.buffer.dtype}, the intrinsic's {op.dtype}")
    variables = {iv.var: l.var for iv, l in zip(axes, loops)}
    extents_by_var = {l.var: e for l, e in zip(loops, declared)}
    bound: dict[int, Load] = {}
    for read, load in reads:
        first = bound.setdefault(id(read.tensor.op), load)
        if first.buffer is not load.buffer:
            raise TensorizeError(f"{where}: {read.tensor.name} is read from two buffers")
    output_read = TensorRead(intrinsic.declaration, tuple(iv.var for iv in op.axis))
    strided = intrinsic.strided
    regions = [_region(where, body.index, output_read, body.buffer, variables, extents_by_var, strided)]
    for tensor in intrinsic.inputs:
        matches = [(r, l) for r, l in reads if r.tensor.op is tensor.op]
        if not matches:
            raise TensorizeError(f"{where}: the nest never reads an operand for {tensor.name}")
        found = {_region(where, load.index, read, load.buffer, variables, extents_by_var, strided)
                 for read, load in matches}
        if len(found) > 1:
            raise TensorizeError(f"{where}: {tensor.name} is read at two different regions")
        regions.append(found.pop())
    operands = tuple(base for base, _ in regions)
    return IntrinsicCall(intrinsic.name, operands, tuple(s for _, s in regions) if strided else ())


def _match(expr: Expr, pattern: Expr, reads: list, where: str) -> None:
    """`expr` (the nest's) has `pattern`'s (the declaration's) shape: same ops and dtypes, loads for reads."""
    if isinstance(pattern, TensorRead):
        if not isinstance(pattern.tensor.op, PlaceholderOp):
            raise TensorizeError(f"{where}: declarations read placeholders only")
        if not isinstance(expr, Load) or expr.dtype != pattern.dtype:
            raise TensorizeError(f"{where}: expected a {pattern.dtype} load for {pattern.tensor.name}, found {expr}"
                                 f"{' (' + expr.dtype + ')' if isinstance(expr, Load) else ''}")
        reads.append((pattern, expr))
    elif isinstance(pattern, Cast):
        if not isinstance(expr, Cast) or expr.dtype != pattern.dtype:
            raise TensorizeError(f"{where}: expected a cast to {pattern.dtype}, found {expr}")
        _match(expr.value, pattern.value, reads, where)
    elif isinstance(pattern, BinOp):
        if not isinstance(expr, BinOp) or expr.op != pattern.op or expr.dtype != pattern.dtype:
            raise TensorizeError(f"{where}: expected {pattern.op} of {pattern.dtype}, found {expr}")
        _match(expr.a, pattern.a, reads, where)
        _match(expr.b, pattern.b, reads, where)
    else:
        raise TensorizeError(f"{where}: declarations may hold reads, casts and arithmetic only, found {pattern}")


def _region(where: str, index: Expr, read: TensorRead, buffer, variables: dict, extents: dict,
            strided: bool = False) -> tuple[Load, tuple[int, ...]]:
    """The first element of the region `index` covers over the loops and its element strides, after checking
    that it steps as the declaration's read of a dense placeholder of its shape does (at every point, or a
    sample); `strided`: the placeholder's outer dimensions may step by any constant stride (measured here)."""
    strides, step = [], 1
    for d in reversed(read.tensor.shape):
        strides.insert(0, step)
        step *= d
    loop_vars = list(extents)
    if strided:
        at_zero = {**{v: 0 for v in walk_expr(index) if isinstance(v, Var)}, **{v: 0 for v in loop_vars}}
        origin = _evaluate(index, at_zero, where)
        for d, declared_index in enumerate(read.indices[:-1]):  # one step of each dimension's loop
            if isinstance(declared_index, Var) and declared_index in variables:
                strides[d] = _evaluate(index, {**at_zero, variables[declared_index]: 1}, where) - origin
    declared = sum((i * s for i, s in zip(read.indices, strides)), IntImm(0, "int64"))
    free = sorted({v for v in walk_expr(index) if isinstance(v, Var) and v not in extents}, key=lambda v: v.name)
    chooser = random.Random(len(loop_vars))
    points = list(itertools.product(*(range(extents[v]) for v in loop_vars)))
    if len(points) > 512:
        points = points[:: max(1, len(points) // 512)] + [tuple(extents[v] - 1 for v in loop_vars)]
    for trial in range(3):
        outer = {v: chooser.randint(0, 7) * (trial > 0) for v in free}
        origin = _evaluate(index, {**outer, **{v: 0 for v in loop_vars}}, where)
        for point in points:
            env = dict(zip(loop_vars, point))
            got = _evaluate(index, {**outer, **env}, where) - origin
            want = _evaluate(declared, {iv: env[var] for iv, var in variables.items()}, where)
            if got != want:
                raise TensorizeError(f"{where}: {buffer.name}[{index}] does not step over the loops as the "
                                     f"intrinsic's dense {read.tensor.name}{list(read.tensor.shape)} does "
                                     f"(at loop point {point}: offset {got}, declared {want})")
    base = simplify(substitute(index, {v: IntImm(0, v.dtype) for v in loop_vars}))
    return Load(buffer, base), tuple(strides)


def _evaluate(expr: Expr, env: dict, where: str) -> int:
    if isinstance(expr, IntImm):
        return int(expr.value)
    if isinstance(expr, Var):
        if expr not in env:
            raise TensorizeError(f"{where}: index variable {expr.name} is neither a loop nor outside the nest")
        return int(env[expr])
    if isinstance(expr, Cast):
        return _evaluate(expr.value, env, where)
    if isinstance(expr, BinOp):
        a, b = _evaluate(expr.a, env, where), _evaluate(expr.b, env, where)
        ops = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "floordiv": lambda: a // b,
               "floormod": lambda: a % b, "min": lambda: min(a, b), "max": lambda: max(a, b)}
        if expr.op in ops:
            return ops[expr.op]()
    raise TensorizeError(f"{where}: cannot follow the index expression {expr}")

