"""Arithmetic simplification of loop programs: constant folding, a canonical linear form for index
arithmetic, and range-aware rewrites (floordiv/floormod by constants, provable comparisons).

Split and fuse produce index expressions like ((x.o * 16 + x.i) // 16); these rules bring them
back to the form codegen can vectorize, and delete guards that can never fail.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Union

from .expr import COMPARISONS, BinOp, Cast, Expr, FloatImm, IntImm, Not, Select, Var, is_float
from .functor import rewrite_expr, rewrite_stmt
from .stmt import For, ForKind, IfThenElse, LetStmt, Seq, Stmt, seq

Range = Optional[tuple[int, int]]  # inclusive bounds, None = unknown


def _is_int(e: Expr) -> bool:
    return not is_float(e.dtype) and e.dtype != "bool"


def _linear(e: Expr) -> tuple[dict[Expr, int], int]:
    """Decompose an int expression into {term: coefficient} + constant."""
    if isinstance(e, IntImm):
        return {}, e.value
    if isinstance(e, BinOp) and e.op in ("add", "sub"):
        ta, ca = _linear(e.a)
        tb, cb = _linear(e.b)
        sign = 1 if e.op == "add" else -1
        terms = dict(ta)
        for t, c in tb.items():
            terms[t] = terms.get(t, 0) + sign * c
        return {t: c for t, c in terms.items() if c}, ca + sign * cb
    if isinstance(e, BinOp) and e.op == "mul":
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if isinstance(y, IntImm):
                tx, cx = _linear(x)
                return {t: c * y.value for t, c in tx.items() if c * y.value}, cx * y.value
    return {e: 1}, 0


def _build(terms: dict[Expr, int], constant: int, dtype: str) -> Expr:
    out: Optional[Expr] = None
    for t, c in terms.items():
        piece = t if c == 1 else BinOp("mul", t, IntImm(abs(c), dtype)) if c > 0 else None
        if piece is None:  # negative coefficient
            neg = t if c == -1 else BinOp("mul", t, IntImm(-c, dtype))
            out = BinOp("sub", out if out is not None else IntImm(0, dtype), neg)
        else:
            out = piece if out is None else BinOp("add", out, piece)
    if out is None:
        return IntImm(constant, dtype)
    if constant > 0:
        out = BinOp("add", out, IntImm(constant, dtype))
    elif constant < 0:
        out = BinOp("sub", out, IntImm(-constant, dtype))
    return out


class Simplifier:
    def __init__(self, ranges: Optional[dict[Var, tuple[int, int]]] = None):
        self.ranges: dict[Var, tuple[int, int]] = dict(ranges or {})

    # -- ranges --------------------------------------------------------------------------------
    def range_of(self, e: Expr) -> Range:
        if isinstance(e, IntImm):
            return (e.value, e.value)
        if isinstance(e, Var):
            return self.ranges.get(e)
        if not isinstance(e, BinOp) or not _is_int(e):
            return None
        if e.op in ("add", "sub", "mul"):
            terms, const = _linear(e)
            if len(terms) == 1 and next(iter(terms)) is e:
                a, b = self.range_of(e.a), self.range_of(e.b)
                if e.op == "mul" and a and b:
                    prods = [x * y for x in a for y in b]
                    return (min(prods), max(prods))
                return None
            lo = hi = const
            for t, c in terms.items():
                r = self.range_of(t)
                if r is None:
                    return None
                lo += min(c * r[0], c * r[1])
                hi += max(c * r[0], c * r[1])
            return (lo, hi)
        b = self.range_of(e.b)
        a = self.range_of(e.a)
        if e.op == "floordiv" and b and b[0] == b[1] and b[0] > 0 and a:
            return (a[0] // b[0], a[1] // b[0])
        if e.op == "floormod" and b and b[0] == b[1] and b[0] > 0:
            if a and 0 <= a[0] and a[1] < b[0]:
                return a
            return (0, b[0] - 1)
        if e.op in ("min", "max") and a and b:
            f = min if e.op == "min" else max
            return (f(a[0], b[0]), f(a[1], b[1]))
        return None

    # -- rewriting -----------------------------------------------------------------------------
    def __call__(self, expr: Expr) -> Expr:
        return rewrite_expr(expr, self._visit)

    def _visit(self, e: Expr) -> Optional[Expr]:
        if isinstance(e, BinOp):
            return self._binop(e)
        if isinstance(e, Select) and isinstance(e.cond, IntImm):
            return e.true_value if e.cond.value else e.false_value
        if isinstance(e, Not) and isinstance(e.a, IntImm):
            return IntImm(int(not e.a.value), "bool")
        if isinstance(e, Cast) and isinstance(e.value, (IntImm, FloatImm)) and e.dtype != "bool":
            v = e.value.value
            return FloatImm(float(v), e.dtype) if is_float(e.dtype) else IntImm(int(v), e.dtype)
        return None

    def _binop(self, e: BinOp) -> Optional[Expr]:
        a, b, op = e.a, e.b, e.op
        if op in ("and", "or"):
            for x, y in ((a, b), (b, a)):
                if isinstance(x, IntImm):
                    if op == "and":
                        return y if x.value else IntImm(0, "bool")
                    return IntImm(1, "bool") if x.value else y
            return None
        if op in COMPARISONS and _is_int(a):
            return self._compare(op, a, b)
        if not _is_int(e):
            if isinstance(a, FloatImm) and isinstance(b, FloatImm):
                return _fold_float(op, a, b)
            return None
        if isinstance(a, IntImm) and isinstance(b, IntImm):
            return _fold_int(op, a.value, b.value, e.dtype)
        if op in ("add", "sub", "mul"):
            terms, const = _linear(e)
            return _build(_merge_divmod(terms), const, e.dtype)
        if op in ("floordiv", "floormod") and isinstance(b, IntImm) and b.value > 0:
            return self._divmod(op, a, b.value, e.dtype)
        if op in ("min", "max"):
            ra, rb = self.range_of(a), self.range_of(b)
            if ra and rb:
                if ra[1] <= rb[0]:
                    return a if op == "min" else b
                if rb[1] <= ra[0]:
                    return b if op == "min" else a
        return None

    def _divmod(self, op: str, x: Expr, c: int, dtype: str) -> Expr:
        if c == 1:
            return x if op == "floordiv" else IntImm(0, dtype)
        if op == "floordiv" and isinstance(x, BinOp) and x.op == "floordiv" and isinstance(x.b, IntImm) and x.b.value > 0:
            return self._divmod("floordiv", x.a, x.b.value * c, dtype)
        terms, const = _linear(x)
        # x = c*Q + R with Q = the terms whose coefficients c divides; floor((cQ+R)/c) = Q + floor(R/c).
        q_terms = {t: k // c for t, k in terms.items() if k % c == 0}
        r_terms = {t: k for t, k in terms.items() if k % c != 0}
        q_const, r_const = divmod(const, c)
        rest = _build(r_terms, r_const, dtype)
        r_range = self.range_of(rest)
        fits = r_range is not None and 0 <= r_range[0] and r_range[1] < c
        split = None if fits else self._split_by_factor(terms, const, c, dtype)
        if split is not None:
            # x = g*H + L with 0 <= L < g and g | c: x // c = H // (c/g), x % c = g*(H % (c/g)) + L
            # (a reshape's flat index (ch*784 + row*28 + col) // 1568 is ch // 2: shufflenet's shuffle).
            g, high, low = split
            if op == "floordiv":
                return self._divmod("floordiv", high, c // g, dtype)
            high_mod = self._divmod("floormod", high, c // g, dtype)
            return self(BinOp("add", BinOp("mul", high_mod, IntImm(g, dtype)), low))
        if op == "floormod":
            if fits:
                return rest
            if not q_terms and not q_const and rest == x:
                return BinOp("floormod", x, IntImm(c, dtype))
            return BinOp("floormod", rest, IntImm(c, dtype)) if not isinstance(rest, IntImm) else IntImm(rest.value % c, dtype)
        quotient = _build(q_terms, q_const, dtype)
        if fits:
            return quotient
        if not q_terms and not q_const:
            return BinOp("floordiv", x, IntImm(c, dtype))
        rem = IntImm(r_const // c, dtype) if isinstance(rest, IntImm) else BinOp("floordiv", rest, IntImm(c, dtype))
        return self(BinOp("add", quotient, rem))

    def _split_by_factor(self, terms: dict[Expr, int], const: int, c: int,
                         dtype: str) -> Optional[tuple[int, Expr, Expr]]:
        """(g, H, L) with x = g*H + L, 1 < g < c, g | c and 0 <= L < g provably: the largest such g among
        the coefficients' common factors with c; None when there is none."""
        for g in sorted({math.gcd(k, c) for k in terms.values()} - {1, c}, reverse=True):
            high = {t: k // g for t, k in terms.items() if k % g == 0}
            low_terms = {t: k for t, k in terms.items() if k % g != 0}
            h_const, l_const = divmod(const, g)
            low = _build(low_terms, l_const, dtype)
            r = self.range_of(low)
            if high and r is not None and 0 <= r[0] and r[1] < g:
                return g, _build(high, h_const, dtype), low
        return None

    def _compare(self, op: str, a: Expr, b: Expr) -> Optional[Expr]:
        diff = self(BinOp("sub", a, b))
        r = self.range_of(diff)
        if r is None:
            return None
        lo, hi = r
        truth = {"lt": (hi < 0, lo >= 0), "le": (hi <= 0, lo > 0), "gt": (lo > 0, hi <= 0),
                 "ge": (lo >= 0, hi < 0), "eq": (lo == hi == 0, lo > 0 or hi < 0),
                 "ne": (lo > 0 or hi < 0, lo == hi == 0)}[op]
        if truth[0]:
            return IntImm(1, "bool")
        if truth[1]:
            return IntImm(0, "bool")
        return None


def _merge_divmod(terms: dict[Expr, int]) -> dict[Expr, int]:
    """(y // c) * c*k + (y % c) * k  ->  y * k: undoes what fuse's index recovery introduced."""
    for t, k in list(terms.items()):
        if isinstance(t, BinOp) and t.op == "floormod" and isinstance(t.b, IntImm) and t in terms:
            div = BinOp("floordiv", t.a, t.b)
            if terms.get(div) == k * t.b.value:
                del terms[t], terms[div]
                terms[t.a] = terms.get(t.a, 0) + k
                if not terms[t.a]:
                    del terms[t.a]
    return terms


def _fold_int(op: str, x: int, y: int, dtype: str) -> Optional[Expr]:
    if op in ("floordiv", "floormod", "div") and y == 0:
        return None
    value = {"add": lambda: x + y, "sub": lambda: x - y, "mul": lambda: x * y, "floordiv": lambda: x // y,
             "floormod": lambda: x % y, "div": lambda: int(x / y) if abs(x) < 2**52 else None,
             "min": lambda: min(x, y), "max": lambda: max(x, y)}.get(op, lambda: None)()
    return None if value is None else IntImm(value, dtype)


def _fold_float(op: str, a: FloatImm, b: FloatImm) -> Optional[Expr]:
    import numpy as np

    x, y = np.array(a.value, a.dtype), np.array(b.value, b.dtype)
    fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.minimum, "max": np.maximum}.get(op)
    return None if fn is None else FloatImm(float(fn(x, y)), a.dtype)


def simplify(expr: Expr, ranges: Optional[dict[Var, tuple[int, int]]] = None) -> Expr:
    return Simplifier(ranges)(expr)


# A For annotation: keep this loop even with one iteration (a nest tensorize matches after simplification).
KEEP_UNIT_LOOP = "keep_unit_loop"


def simplify_stmt(stmt: Stmt, ranges: Optional[dict[Var, tuple[int, int]]] = None) -> Stmt:
    """Simplify with loop-variable ranges in scope; drop unit loops, empty loops and decided branches."""
    simp = Simplifier(ranges)

    def visit(s: Stmt) -> Optional[Stmt]:
        if isinstance(s, For):
            extent = simp(s.extent)
            if isinstance(extent, IntImm) and extent.value <= 0:
                return Seq(())
            # A unit loop disappears, except one bound to a GPU launch axis: it says that a single
            # thread (or block) does the work, not every thread of the launch.
            if (isinstance(extent, IntImm) and extent.value == 1 and s.kind is not ForKind.THREAD_BINDING
                    and KEEP_UNIT_LOOP not in dict(s.annotations)):
                simp.ranges[s.var] = (0, 0)
                return visit(_subst_var(s.body, s.var))
            r = simp.range_of(extent)
            simp.ranges[s.var] = (0, r[1] - 1) if r else (0, 2**62)
            body = visit(s.body)
            del simp.ranges[s.var]
            return For(s.var, extent, s.kind, body, s.annotations)
        if isinstance(s, IfThenElse):
            cond = simp(s.cond)
            if isinstance(cond, IntImm):
                branch = s.then_case if cond.value else s.else_case
                return visit(branch) if branch is not None else Seq(())
            return IfThenElse(cond, visit(s.then_case), visit(s.else_case) if s.else_case is not None else None)
        if isinstance(s, Seq):
            return seq(*[x for x in (visit(c) for c in s.stmts) if not (isinstance(x, Seq) and not x.stmts)])
        if isinstance(s, LetStmt):
            value = simp(s.value)
            r = simp.range_of(value)
            if r:
                simp.ranges[s.var] = r
            return LetStmt(s.var, value, visit(s.body))
        if hasattr(s, "body"):
            return type(s)(s.buffer, visit(s.body))  # Allocate
        return rewrite_stmt(s, lambda e: None, None).__class__(*[simp(getattr(s, f)) if isinstance(getattr(s, f), Expr) else getattr(s, f) for f in s.__dataclass_fields__])

    return visit(stmt)


def _subst_var(stmt: Stmt, var: Var) -> Stmt:
    from .functor import substitute_stmt

    return substitute_stmt(stmt, {var: IntImm(0, var.dtype)})


def linear_form(e: Expr) -> tuple[dict[Expr, int], int]:
    """An int expression as ({term: coefficient}, constant); a non-linear part is one opaque term."""
    return _linear(e)


def from_linear(terms: dict[Expr, int], constant: int, dtype: str = "int64") -> Expr:
    return _build(terms, constant, dtype)


def specialize(node: Union[Stmt, Expr], var: Var, value: int) -> Union[Stmt, Expr]:
    """`node` with `var` = `value`, where each select whose condition that decides is replaced by its
    chosen arm before any arm is visited: a table of arms indexed by an unrolled loop (a Winograd
    transform's) costs one arm per copy, not the whole table (as substituting, then simplifying)."""
    if node is var:
        return IntImm(value, var.dtype)
    if isinstance(node, Select):
        cond = simplify(specialize(node.cond, var, value))
        if isinstance(cond, IntImm):
            return specialize(node.true_value if cond.value else node.false_value, var, value)
        return Select(cond, specialize(node.true_value, var, value), specialize(node.false_value, var, value))
    if not dataclasses.is_dataclass(node) or isinstance(node, (Var, IntImm, FloatImm)):
        return node
    changed = {}
    for field in dataclasses.fields(node):
        old = getattr(node, field.name)
        if isinstance(old, (Expr, Stmt)):
            new = specialize(old, var, value)
        elif isinstance(old, tuple) and old and isinstance(old[0], (Expr, Stmt)):
            new = tuple(specialize(x, var, value) for x in old)
            new = old if all(a is b for a, b in zip(new, old)) else new
        else:
            continue
        if new is not old:
            changed[field.name] = new
    return dataclasses.replace(node, **changed) if changed else node
