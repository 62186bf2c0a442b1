"""Tensor expressions: placeholder, compute and reduce_axis define *what* a kernel computes.

How it is computed (loop order, tiling, vectorization, threads) lives apart in `schedule.py`,
as in Halide and TVM: one compute definition per op, many possible schedules.
"""
from __future__ import annotations

import inspect
import itertools
import weakref
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

import numpy as np

from ..errors import ScheduleError
from ..tir.expr import Expr, ExprLike, Var, as_expr, binop, const, is_float, maximum, minimum

_ids = itertools.count()


@dataclass(frozen=True, eq=False)
class IterVar:
    """One loop axis: a variable with extent 0..extent-1, spatial (an output axis) or reduce."""

    var: Var
    extent: int
    kind: str = "spatial"  # "spatial" | "reduce"

    @property
    def name(self) -> str:
        return self.var.name

    def __repr__(self) -> str:
        return f"IterVar({self.var.name}, {self.extent}, {self.kind})"

    # Arithmetic on an IterVar means arithmetic on its variable (TVM allows `A[i, k * 2]`).
    def __add__(self, o): return self.var + o
    def __radd__(self, o): return o + self.var
    def __sub__(self, o): return self.var - o
    def __rsub__(self, o): return o - self.var
    def __mul__(self, o): return self.var * o
    def __rmul__(self, o): return o * self.var
    def __floordiv__(self, o): return self.var // o
    def __mod__(self, o): return self.var % o


def _iter_var(name: str, extent: int, kind: str) -> IterVar:
    return IterVar(Var(f"{name}"), int(extent), kind)


@dataclass(eq=False)
class PlaceholderOp:
    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def input_tensors(self) -> list["Tensor"]:
        return []


@dataclass(eq=False)
class ComputeOp:
    name: str
    shape: tuple[int, ...]
    dtype: str
    axis: tuple[IterVar, ...]
    body: Expr  # a Reduce at the top for reductions
    tag: str = ""
    attrs: dict = field(default_factory=dict)

    @property
    def reduce_axis(self) -> tuple[IterVar, ...]:
        return self.body.axis if isinstance(self.body, Reduce) else ()

    @property
    def input_tensors(self) -> list["Tensor"]:
        from ..tir.functor import walk_expr

        known = _INPUTS.get(self)
        if known is not None and known[0] is self.body:  # schedules ask again and again (find_ops): walk once
            return list(known[1])
        seen: dict[int, Tensor] = {}
        for e in walk_expr(self.body):
            if isinstance(e, TensorRead):
                seen.setdefault(id(e.tensor.op), e.tensor)
        _INPUTS[self] = (self.body, tuple(seen.values()))
        return list(seen.values())


# ComputeOp -> (the body its inputs were read from, those inputs); weak: an op's entry goes with the op.
_INPUTS: "weakref.WeakKeyDictionary[ComputeOp, tuple[Expr, tuple[Tensor, ...]]]" = weakref.WeakKeyDictionary()


@dataclass(eq=False)
class ExternOp(ComputeOp):
    """A stage whose loop program is written by hand, for sequential algorithms a compute rule
    cannot state (greedy NonMaxSuppression): `build(input buffers, output buffer) -> Stmt`. It has
    no axes to schedule; lowering calls `build` where the stage's loop nest would go."""

    inputs: tuple["Tensor", ...] = ()
    build: Optional[Callable] = None

    @property
    def input_tensors(self) -> list["Tensor"]:
        return list(self.inputs)


Operation = Union[PlaceholderOp, ComputeOp]


@dataclass(frozen=True, eq=False)
class Tensor:
    op: Operation

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def shape(self) -> tuple[int, ...]:
        return self.op.shape

    @property
    def dtype(self) -> str:
        return self.op.dtype

    @property
    def ndim(self) -> int:
        return len(self.op.shape)

    def __call__(self, *indices: ExprLike) -> "TensorRead":
        if len(indices) == 1 and isinstance(indices[0], (tuple, list)):
            indices = tuple(indices[0])
        if len(indices) != self.ndim:
            raise ScheduleError(f"tensor {self.name} has {self.ndim} dims, indexed with {len(indices)}")
        return TensorRead(self, tuple(as_expr(i) for i in indices))

    __getitem__ = __call__

    def __repr__(self) -> str:
        return f"Tensor({self.name}, {self.dtype}{list(self.shape)})"


@dataclass(frozen=True)
class TensorRead(Expr):
    """`tensor[indices]` inside a compute body; lowering turns it into a flat Load (or inlines it)."""

    tensor: Tensor
    indices: tuple[Expr, ...]

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.tensor.dtype

    def rewrite_children(self, fn: Callable[[Expr], Expr]) -> Expr:
        new = tuple(fn(i) for i in self.indices)
        return self if all(a is b for a, b in zip(new, self.indices)) else TensorRead(self.tensor, new)

    def __str__(self) -> str:
        return f"{self.tensor.name}[{', '.join(map(str, self.indices))}]"


@dataclass(frozen=True)
class Reduce(Expr):
    """A commutative reduction of `source` over `axis` (only at the top of a compute body)."""

    combiner: str  # "sum" | "max" | "min" | "prod"
    source: Expr
    axis: tuple[IterVar, ...]
    init: Expr

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.source.dtype

    def rewrite_children(self, fn: Callable[[Expr], Expr]) -> Expr:
        src = fn(self.source)
        return self if src is self.source else Reduce(self.combiner, src, self.axis, self.init)

    def combine(self, acc: Expr, value: Expr) -> Expr:
        return {"sum": lambda: acc + value, "prod": lambda: acc * value,
                "max": lambda: maximum(acc, value), "min": lambda: minimum(acc, value)}[self.combiner]()

    def __str__(self) -> str:
        return f"{self.combiner}({self.source}, axis=[{', '.join(a.name for a in self.axis)}])"


def placeholder(shape: Sequence[int], dtype: str = "float32", name: str = "placeholder") -> Tensor:
    return Tensor(PlaceholderOp(name, tuple(int(d) for d in shape), np.dtype(dtype).name))


def compute(shape: Sequence[int], fcompute: Callable[..., ExprLike], name: str = "compute", tag: str = "",
            attrs: Optional[dict] = None, dtype: Optional[str] = None) -> Tensor:
    """Define `out[i0, i1, ...] = fcompute(i0, i1, ...)`; axis names come from fcompute's parameters."""
    shape = tuple(int(d) for d in shape)
    try:
        params = list(inspect.signature(fcompute).parameters.values())
        simple = all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
        names = [p.name for p in params] if simple and len(params) == len(shape) else []
    except (TypeError, ValueError):
        names = []
    names = names or [f"i{k}" for k in range(len(shape))]
    uid = next(_ids)
    axis = tuple(_iter_var(f"{n}.{uid}", d, "spatial") for n, d in zip(names, shape))
    body = as_expr(fcompute(*[a.var for a in axis]))
    if dtype is not None and body.dtype != dtype:
        from ..tir.expr import cast

        body = cast(dtype, body)
    if _contains_nested_reduce(body):
        raise ScheduleError(f"compute {name}: a Reduce may only appear at the top of the body")
    return Tensor(ComputeOp(name, shape, body.dtype, axis, body, tag, dict(attrs or {})))


def extern(shape: Sequence[int], inputs: Sequence["Tensor"], build: Callable, dtype: str, name: str = "extern",
           tag: str = "extern") -> Tensor:
    """A tensor computed by `build(input buffers, output buffer) -> Stmt` (see ExternOp)."""
    op = ExternOp(name, tuple(int(d) for d in shape), np.dtype(dtype).name, (), const(0, dtype), tag, {},
                  tuple(inputs), build)
    return Tensor(op)


def _contains_nested_reduce(body: Expr) -> bool:
    from ..tir.functor import walk_expr

    inner = body.source if isinstance(body, Reduce) else body
    return any(isinstance(e, Reduce) for e in walk_expr(inner))


def reduce_axis(dom: Union[int, tuple[int, int]], name: str = "k") -> IterVar:
    """A reduction axis over 0..n-1 (`dom` = n or (0, n))."""
    if isinstance(dom, tuple):
        if dom[0] != 0:
            raise ScheduleError("reduce_axis must start at 0")
        dom = dom[1]
    return _iter_var(f"{name}.{next(_ids)}", int(dom), "reduce")


def _reducer(combiner: str, identity: Callable[[str], ExprLike]):
    def reduce(source: ExprLike, axis: Union[IterVar, Sequence[IterVar]]) -> Reduce:
        source = as_expr(source)
        axes = (axis,) if isinstance(axis, IterVar) else tuple(axis)
        return Reduce(combiner, source, axes, as_expr(identity(source.dtype), source.dtype))

    reduce.__name__ = combiner
    return reduce


def lowest(dtype: str) -> Union[int, float]:
    return -float("inf") if is_float(dtype) else (0 if dtype == "bool" else int(np.iinfo(dtype).min))


def highest(dtype: str) -> Union[int, float]:
    return float("inf") if is_float(dtype) else (1 if dtype == "bool" else int(np.iinfo(dtype).max))


sum = _reducer("sum", lambda dt: 0)  # noqa: A001 - mirrors te.sum
prod = _reducer("prod", lambda dt: 1)
max = _reducer("max", lowest)  # noqa: A001
min = _reducer("min", highest)  # noqa: A001
