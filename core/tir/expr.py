"""Expressions of the loop program (TIR), shared by tensor expressions: immutable dataclasses.

Arithmetic operators build nodes (`i * 4 + j`); `==` stays structural equality, so use `eq()`/`ne()`
for comparisons that compute. Index arithmetic is int64; buffers are flat (one index per load).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np

from ..narrow_dtypes import MINIFLOATS  # float8/float4/e8m0 are floats to TIR

ExprLike = Union["Expr", int, float, bool]

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64", *MINIFLOATS)
COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
LOGICAL = ("and", "or")
# Integer bit operations; "shl"/"shr" need 0 <= shift < bit width ("shr" is arithmetic on signed dtypes).
BITWISE = ("bitand", "bitor", "bitxor", "shl", "shr")
# "truncmod" is C's % and fmod (the result has the dividend's sign); "floormod" is numpy's %.
BINARY_OPS = ("add", "sub", "mul", "div", "floordiv", "floormod", "truncmod", "min", "max", "pow") + COMPARISONS \
    + LOGICAL + BITWISE
INTRINSICS = ("exp", "log", "sqrt", "erf", "tanh", "abs", "floor", "ceil", "round", "isnan", "sin", "cos", "trunc",
              "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "reinterpret")


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


class Expr:
    dtype: str

    # Arithmetic builds nodes; Python numbers are converted to the other operand's dtype.
    def __add__(self, other): return binop("add", self, other)
    def __radd__(self, other): return binop("add", other, self)
    def __sub__(self, other): return binop("sub", self, other)
    def __rsub__(self, other): return binop("sub", other, self)
    def __mul__(self, other): return binop("mul", self, other)
    def __rmul__(self, other): return binop("mul", other, self)
    def __truediv__(self, other): return binop("div", self, other)
    def __rtruediv__(self, other): return binop("div", other, self)
    def __floordiv__(self, other): return binop("floordiv", self, other)
    def __rfloordiv__(self, other): return binop("floordiv", other, self)
    def __mod__(self, other): return binop("floormod", self, other)
    def __rmod__(self, other): return binop("floormod", other, self)
    def __neg__(self): return binop("sub", const(0, self.dtype), self)
    def __lt__(self, other): return binop("lt", self, other)
    def __le__(self, other): return binop("le", self, other)
    def __gt__(self, other): return binop("gt", self, other)
    def __ge__(self, other): return binop("ge", self, other)

    def __bool__(self):
        raise TypeError("a symbolic expression has no truth value; use eq()/ne()/select()")


@dataclass(frozen=True)
class IntImm(Expr):
    value: int
    dtype: str = "int64"

    def __str__(self): return str(self.value)


@dataclass(frozen=True)
class FloatImm(Expr):
    value: float
    dtype: str = "float32"

    def __str__(self): return repr(self.value) + ("f" if self.dtype == "float32" else "")


@dataclass(frozen=True)
class Var(Expr):
    name: str
    dtype: str = "int64"

    def __str__(self): return self.name


@dataclass(frozen=True)
class BinOp(Expr):
    op: str
    a: Expr
    b: Expr

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return "bool" if self.op in COMPARISONS or self.op in LOGICAL else self.a.dtype

    def __str__(self):
        sym = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "floormod": "%",
               "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "and": "&&", "or": "||"}
        if self.op in sym:
            return f"({self.a} {sym[self.op]} {self.b})"
        return f"{self.op}({self.a}, {self.b})"


@dataclass(frozen=True)
class Not(Expr):
    a: Expr
    dtype: str = "bool"

    def __str__(self): return f"!{self.a}"


@dataclass(frozen=True)
class Cast(Expr):
    dtype: str
    value: Expr

    def __str__(self): return f"{self.dtype}({self.value})"


@dataclass(frozen=True)
class Select(Expr):
    cond: Expr
    true_value: Expr
    false_value: Expr

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.true_value.dtype

    def __str__(self): return f"select({self.cond}, {self.true_value}, {self.false_value})"


@dataclass(frozen=True)
class Call(Expr):
    """A pure math intrinsic (one of INTRINSICS) applied elementwise; or core/tir/index_guard.py's run-time index
    check (not pure: it records a bad index)."""

    name: str
    args: tuple[Expr, ...]
    dtype: str

    def __str__(self): return f"{self.name}({', '.join(map(str, self.args))})"


@dataclass(frozen=True)
class Buffer:
    """A flat, typed memory region. `scope` is "global" (a kernel parameter), "local" (on the
    stack; a GPU thread's registers) or "shared" (a GPU block's shared memory)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    scope: str = "global"

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.numel * np.dtype(self.dtype).itemsize

    def load(self, index: ExprLike) -> "Load":
        return Load(self, as_expr(index))

    def __str__(self): return self.name


@dataclass(frozen=True)
class Load(Expr):
    buffer: Buffer
    index: Expr

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.buffer.dtype

    def __str__(self): return f"{self.buffer.name}[{self.index}]"


def const(value: Union[int, float, bool], dtype: str) -> Expr:
    if dtype == "bool":
        return IntImm(int(bool(value)), "bool")
    if is_float(dtype):
        return FloatImm(float(value), dtype)
    return IntImm(int(value), dtype)


def as_expr(value: ExprLike, dtype: str | None = None) -> Expr:
    if isinstance(value, Expr):
        return value
    if isinstance(getattr(value, "var", None), Expr):  # a TE IterVar stands for its variable
        return value.var
    if isinstance(value, (bool, np.bool_)):
        return const(bool(value), dtype or "bool")
    if isinstance(value, (int, np.integer)):
        return const(int(value), dtype or "int64")
    if isinstance(value, (float, np.floating)):
        return const(float(value), dtype or "float32")
    raise TypeError(f"cannot make an expression from {value!r}")


def binop(op: str, a: ExprLike, b: ExprLike) -> Expr:
    # A Python number takes the dtype of the symbolic operand, so `x * 2` works for any dtype.
    if not isinstance(a, Expr):
        a = as_expr(a, b.dtype if isinstance(b, Expr) else None)
    if not isinstance(b, Expr):
        b = as_expr(b, a.dtype)
    if a.dtype != b.dtype and op not in LOGICAL:
        raise TypeError(f"dtype mismatch in {op}: {a.dtype} vs {b.dtype} ({a} , {b})")
    return BinOp(op, a, b)


def eq(a: ExprLike, b: ExprLike) -> Expr: return binop("eq", a, b)
def ne(a: ExprLike, b: ExprLike) -> Expr: return binop("ne", a, b)
def logical_and(a: ExprLike, b: ExprLike) -> Expr: return binop("and", a, b)
def logical_or(a: ExprLike, b: ExprLike) -> Expr: return binop("or", a, b)
def minimum(a: ExprLike, b: ExprLike) -> Expr: return binop("min", a, b)
def maximum(a: ExprLike, b: ExprLike) -> Expr: return binop("max", a, b)


def select(cond: Expr, true_value: ExprLike, false_value: ExprLike) -> Expr:
    dtype = true_value.dtype if isinstance(true_value, Expr) else (false_value.dtype if isinstance(false_value, Expr) else None)
    return Select(cond, as_expr(true_value, dtype), as_expr(false_value, dtype))


def cast(dtype: str, value: ExprLike) -> Expr:
    value = as_expr(value)
    return value if value.dtype == dtype else Cast(dtype, value)


def reinterpret(dtype: str, value: ExprLike) -> Expr:
    """The bits of `value` read as `dtype`, which must have the same size in memory (ONNX BitCast)."""
    value = as_expr(value)
    return value if value.dtype == dtype else Call("reinterpret", (value,), dtype)


def call(name: str, *args: ExprLike) -> Expr:
    if name not in INTRINSICS:
        raise ValueError(f"unknown intrinsic {name}")
    exprs = tuple(as_expr(a) for a in args)
    return Call(name, exprs, "bool" if name == "isnan" else exprs[0].dtype)
