"""Binary broadcast computes (numpy broadcasting): arithmetic, remainders, comparisons, logic, bit operations,
and Where."""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from ..errors import ShapeError
from ..graph.ir import TensorType
from ..te import tensor as te
from ..tir.expr import Expr, binop, cast, const, eq, is_float, logical_and, logical_or, maximum, minimum, select
from .common import broadcast_read, require
from .registry import register_compute

BinaryFn = Callable[[Expr, Expr], Expr]


def _pow(a: Expr, b: Expr) -> Expr:
    # ONNX allows an exponent of another dtype; compute in the base's dtype as ONNX Runtime does.
    return binop("pow", a, cast(a.dtype, b))


def _remainder(op: str) -> BinaryFn:
    """floormod/truncmod; an integer divisor of 0 gives 0 (numpy) rather than a trap, and so does -1,
    whose remainder is always 0 but whose division overflows on INT_MIN."""
    def body(a: Expr, b: Expr) -> Expr:
        if is_float(a.dtype):
            return binop(op, a, b)
        idle = eq(b, const(0, b.dtype))
        if a.dtype.startswith("int"):
            idle = logical_or(idle, eq(b, const(-1, b.dtype)))
        return binop(op, a, select(idle, const(1, b.dtype), b))

    return body


def _shift(left: bool) -> BinaryFn:
    """ONNX BitShift: shifting by less than 0 or at least the bit width gives 0, or the sign fill
    when a signed value shifts right. TIR shifts need an in-range amount, so the amount is clamped."""
    def body(a: Expr, b: Expr) -> Expr:
        width = np.dtype(a.dtype).itemsize * 8
        signed = a.dtype.startswith("int")
        valid = b < const(width, b.dtype)
        if signed:
            valid = logical_and(valid, b >= const(0, b.dtype))
        if not left and signed:  # shifting by width-1 is exactly the sign fill
            return binop("shr", a, select(valid, b, const(width - 1, b.dtype)))
        shifted = binop("shl" if left else "shr", a, select(valid, b, const(0, b.dtype)))
        return select(valid, shifted, const(0, a.dtype))

    return body


BINARY: dict[str, BinaryFn] = {
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Mul": lambda a, b: a * b,
    "Div": lambda a, b: a / b,  # TIR "div": true division on floats, truncation toward zero on ints
    "Pow": _pow,
    "Max": maximum,
    "Min": minimum,
    "Equal": lambda a, b: binop("eq", a, b),
    "Less": lambda a, b: binop("lt", a, b),
    "Greater": lambda a, b: binop("gt", a, b),
    "LessOrEqual": lambda a, b: binop("le", a, b),
    "GreaterOrEqual": lambda a, b: binop("ge", a, b),
    "And": lambda a, b: logical_and(cast("bool", a), cast("bool", b)),
    "Or": lambda a, b: logical_or(cast("bool", a), cast("bool", b)),
    "FloorMod": _remainder("floormod"),
    "TruncMod": _remainder("truncmod"),
    "BitwiseAnd": lambda a, b: binop("bitand", a, b),
    "BitwiseOr": lambda a, b: binop("bitor", a, b),
    "BitwiseXor": lambda a, b: binop("bitxor", a, b),
    "BitShiftLeft": _shift(left=True),
    "BitShiftRight": _shift(left=False),
}


def broadcast_shape(op: str, *shapes: Sequence[int]) -> tuple[int, ...]:
    rank = max(len(s) for s in shapes)
    out = []
    for k in range(rank):
        dims = {s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0} - {1}
        if len(dims) > 1:
            raise ShapeError(f"{op}: shapes {' and '.join(str(list(s)) for s in shapes)} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def binary(op: str, a: te.Tensor, b: te.Tensor, out_dtype: Optional[str] = None) -> te.Tensor:
    fn = BINARY[op]
    shape = broadcast_shape(op, a.shape, b.shape)

    def body(*i: Expr) -> Expr:
        x, y = broadcast_read(a, i), broadcast_read(b, i)
        if x.dtype != y.dtype and op != "Pow":
            raise ShapeError(f"{op}: inputs must share one dtype, got {x.dtype} and {y.dtype}")
        out = fn(x, y)
        return cast(out_dtype, out) if out_dtype else out

    return te.compute(shape, body, name=op.lower(), tag="broadcast")


def _register(op: str) -> None:
    @register_compute(op)
    def compute(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
        args = require(inputs, 2, op)
        extra = [t for t in inputs[2:] if t is not None]
        if extra and op not in ("Max", "Min", "Add", "Mul"):  # ONNX's variadic ops
            raise ShapeError(f"{op}: expects 2 inputs, got {len(inputs)}")
        if not extra:
            return [binary(op, args[0], args[1], out_types[0].dtype if out_types else None)]
        shape = broadcast_shape(op, *[t.shape for t in args + extra])
        fn = BINARY[op]

        def body(*i: Expr) -> Expr:
            acc = broadcast_read(args[0], i)
            for t in args[1:] + extra:
                acc = fn(acc, broadcast_read(t, i))
            return acc

        return [te.compute(shape, body, name=op.lower(), tag="broadcast")]


for _op in BINARY:
    _register(_op)


@register_compute("Where")
def where(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    cond, x, y = require(inputs, 3, "Where")
    shape = broadcast_shape("Where", cond.shape, x.shape, y.shape)

    def body(*i: Expr) -> Expr:
        return select(cast("bool", broadcast_read(cond, i)), broadcast_read(x, i), broadcast_read(y, i))

    return [te.compute(shape, body, name="where", tag="broadcast")]


__all__ = ["BINARY", "binary", "broadcast_shape"]
