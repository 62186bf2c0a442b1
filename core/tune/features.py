"""Features of a candidate kernel for the cost model: AutoTVM's itervar features read off the lowered
loop program (per loop level: extent, annotation, touched bytes, reuse and stride per buffer), fixed
length; and the plain knob values as a baseline."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np

from ..tir.expr import BinOp, Buffer, Cast, Expr, IntImm, Load, Select, Var
from ..tir.stmt import Allocate, For, ForKind, IfThenElse, LetStmt, PrimFunc, Seq, Stmt, Store

MAX_LEVELS = 12  # loop levels kept, innermost first (deeper nests fold their outermost levels away)
MAX_BUFFERS = 3  # the store's buffer and the two most-read inputs
KINDS = (ForKind.SERIAL, ForKind.PARALLEL, ForKind.VECTORIZED, ForKind.UNROLLED)
PER_LEVEL = 1 + len(KINDS) + 1 + 2 + 3 * MAX_BUFFERS
GLOBAL = 7
FEATURE_LENGTH = MAX_LEVELS * PER_LEVEL + GLOBAL
FEATURE_VERSION = 2  # bump when the layout changes: records carry features of this version (2: unroll pragma)


@dataclass(frozen=True)
class Loop:
    var: Var
    extent: int
    kind: ForKind
    unroll_hint: int = 0  # an unroll pragma's count (LLVM unrolls the serial loop that many times)


@dataclass(frozen=True)
class StoreNest:
    loops: tuple[Loop, ...]  # outermost first
    store: Store

    @property
    def trips(self) -> int:
        return math.prod(l.extent for l in self.loops)


def store_nests(func: PrimFunc) -> list[StoreNest]:
    """Every store with the loops around it."""
    out: list[StoreNest] = []

    def walk(s: Optional[Stmt], loops: tuple[Loop, ...]) -> None:
        if s is None:
            return
        if isinstance(s, For):
            extent = s.extent.value if isinstance(s.extent, IntImm) else 1
            hint = int(dict(s.annotations).get("pragma_unroll", 0))
            walk(s.body, loops + (Loop(s.var, extent, s.kind, hint),))
        elif isinstance(s, Seq):
            for x in s.stmts:
                walk(x, loops)
        elif isinstance(s, IfThenElse):
            walk(s.then_case, loops)
            walk(s.else_case, loops)
        elif isinstance(s, (LetStmt, Allocate)):
            walk(s.body, loops)
        elif isinstance(s, Store):
            out.append(StoreNest(loops, s))

    walk(func.body, ())
    return out


_ARITH = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "floordiv": lambda a, b: a // b if b else 0, "floormod": lambda a, b: a % b if b else 0,
          "div": lambda a, b: a // b if b else 0, "min": min, "max": max,
          "lt": lambda a, b: int(a < b), "le": lambda a, b: int(a <= b), "gt": lambda a, b: int(a > b),
          "ge": lambda a, b: int(a >= b), "eq": lambda a, b: int(a == b), "ne": lambda a, b: int(a != b),
          "and": lambda a, b: int(bool(a and b)), "or": lambda a, b: int(bool(a or b))}


def evaluate(e: Expr, env: Mapping[str, int]) -> int:
    """An integer index expression at a point (unknown variables are 0)."""
    if isinstance(e, IntImm):
        return int(e.value)
    if isinstance(e, Var):
        return env.get(e.name, 0)
    if isinstance(e, BinOp) and e.op in _ARITH:
        return int(_ARITH[e.op](evaluate(e.a, env), evaluate(e.b, env)))
    if isinstance(e, Cast):
        return evaluate(e.value, env)
    if isinstance(e, Select):
        return evaluate(e.true_value if evaluate(e.cond, env) else e.false_value, env)
    return 0


def loads(e: Expr) -> list[Load]:
    from ..tir.functor import walk_expr

    return [x for x in walk_expr(e) if isinstance(x, Load)]


def _log(x: float) -> float:
    return math.log2(1.0 + abs(x))


def nest_features(nest: StoreNest) -> list[float]:
    accesses: dict[str, tuple[Buffer, Expr]] = {nest.store.buffer.name: (nest.store.buffer, nest.store.index)}
    counts: dict[str, int] = {}
    for ld in loads(nest.store.value):
        counts[ld.buffer.name] = counts.get(ld.buffer.name, 0) + 1
        accesses.setdefault(ld.buffer.name, (ld.buffer, ld.index))
    order = [nest.store.buffer.name] + sorted((n for n in accesses if n != nest.store.buffer.name),
                                              key=lambda n: -counts[n])
    buffers = [accesses[n] for n in order[:MAX_BUFFERS]]
    loops = nest.loops
    # Stride of each loop in each buffer: the index's change when only that loop's variable moves by one.
    strides = [[evaluate(idx, {l.var.name: 1}) - evaluate(idx, {}) for l in loops] for _, idx in buffers]
    levels: list[list[float]] = []
    for d, loop in enumerate(loops):
        inner = loops[d:]
        row = [_log(loop.extent)] + [float(loop.kind is k) for k in KINDS] + [_log(loop.unroll_hint)]
        row += [_log(math.prod(l.extent for l in inner)), _log(math.prod(l.extent for l in loops[:d]))]
        for b, (buf, _) in enumerate(buffers):
            touched = math.prod(l.extent for l, s in zip(inner, strides[b][d:]) if s)
            reuse = math.prod(l.extent for l, s in zip(inner, strides[b][d:]) if not s)
            row += [_log(strides[b][d]), _log(touched * np.dtype(buf.dtype).itemsize), _log(reuse)]
        row += [0.0] * (PER_LEVEL - len(row))
        levels.append(row)
    levels = levels[::-1][:MAX_LEVELS]  # innermost first: the levels that matter most line up across nests
    flat = [x for row in levels for x in row] + [0.0] * (PER_LEVEL * (MAX_LEVELS - len(levels)))
    return flat


def itervar_features(func: PrimFunc) -> np.ndarray:
    """Fixed-length features of the heaviest store's loop nest, plus whole-kernel counts."""
    nests = store_nests(func)
    if not nests:
        return np.zeros(FEATURE_LENGTH, dtype=np.float32)
    main = max(nests, key=lambda n: (n.trips, len(n.loops)))
    lanes = [l.extent for n in nests for l in n.loops if l.kind is ForKind.VECTORIZED]
    unrolled = [l.extent for n in nests for l in n.loops if l.kind is ForKind.UNROLLED]
    parallel = [l.extent for l in main.loops if l.kind is ForKind.PARALLEL]
    glob = [_log(main.trips), float(len(main.loops)), float(len(nests)), _log(max(lanes, default=0)),
            _log(math.prod(l.extent for l in main.loops if l.kind is ForKind.UNROLLED)), float(len(unrolled)),
            _log(math.prod(parallel))]
    return np.asarray(nest_features(main) + glob, dtype=np.float32)


def knob_features(values: Mapping[str, object], names: Sequence[str]) -> np.ndarray:
    """The baseline: log2 of each knob's value (tuples: of each factor)."""
    out: list[float] = []
    for n in names:
        v = values[n]
        out += [_log(x) for x in v] if isinstance(v, tuple) else [_log(float(v))]
    return np.asarray(out, dtype=np.float32)
