"""Binary ONNX ops (opset 7+ numpy broadcasting: arithmetic, Mod, comparisons, logic, bitwise ops, BitShift),
Where, and variadic Max/Min/Sum/Mean as chains."""
from __future__ import annotations

from core.graph.op_defs._common import broadcast_shapes

from .registry import ConvertContext, converter

_DIRECT = {"Add": 7, "Sub": 7, "Mul": 7, "Div": 7, "Equal": 7, "Less": 7, "Greater": 7,
           "LessOrEqual": 12, "GreaterOrEqual": 12, "And": 7, "Or": 7}


def _direct(op: str):
    def convert(ctx: ConvertContext) -> str:
        return ctx.emit1(op, [ctx.input(0), ctx.input(1)])

    return convert


for _op, _since in _DIRECT.items():
    converter(_op, since_version=_since)(_direct(_op))


_BITWISE = {"BitwiseAnd": "BitwiseAnd", "BitwiseOr": "BitwiseOr", "BitwiseXor": "BitwiseXor"}
for _op, _ir_op in _BITWISE.items():
    converter(_op, since_version=18)(_direct(_ir_op))


@converter("Mod", since_version=10)
def mod(ctx: ConvertContext) -> str:
    # fmod=0: numpy's % (the divisor's sign); fmod=1: C's fmod (the dividend's sign).
    op = "TruncMod" if int(ctx.attr("fmod", 0)) else "FloorMod"
    return ctx.emit1(op, [ctx.input(0), ctx.input(1)])


@converter("BitShift", since_version=11)
def bit_shift(ctx: ConvertContext) -> str:
    direction = ctx.attr("direction")
    ops = {"LEFT": "BitShiftLeft", "RIGHT": "BitShiftRight"}
    if direction not in ops:
        ctx.fail(f"direction must be LEFT or RIGHT, got {direction!r}")
    return ctx.emit1(ops[direction], [ctx.input(0), ctx.input(1)])


@converter("Xor", since_version=7)
def xor(ctx: ConvertContext) -> str:
    return ctx.emit1("Not", [ctx.emit1("Equal", [ctx.input(0), ctx.input(1)])])


@converter("Pow", since_version=7)
def power(ctx: ConvertContext) -> str:
    base, exponent = ctx.input(0), ctx.input(1)
    # Since opset 12 the exponent may have another dtype; the IR op wants matching operands.
    if ctx.type_of(1).dtype != ctx.type_of(0).dtype:
        exponent = ctx.emit1("Cast", [exponent], to=ctx.type_of(0).dtype)
    return ctx.emit1("Pow", [base, exponent])


@converter("Where", since_version=9)
def where(ctx: ConvertContext) -> str:
    flag = ctx.builder.constant_value(ctx.input(0))
    if flag is not None and flag.size and (flag.all() or not flag.any()):
        side = ctx.input(1 if flag.all() else 2)  # always this side: a run-time shape stays one Kiln follows
        if side in ctx.builder.runtime_ints and ctx.shape(1 if flag.all() else 2) == broadcast_shapes(
                ctx.where, *(ctx.shape(i) for i in range(3))):
            return side
    return ctx.emit1("Where", [ctx.input(0), ctx.input(1), ctx.input(2)])


def _chain(ctx: ConvertContext, op: str) -> str:
    operands = [ctx.input(i) for i in range(len(ctx.inputs))]
    result = operands[0]
    for operand in operands[1:]:
        result = ctx.emit1(op, [result, operand])
    return result


@converter("Max", since_version=8)
def maximum(ctx: ConvertContext) -> str:
    return _chain(ctx, "Max")


@converter("Min", since_version=8)
def minimum(ctx: ConvertContext) -> str:
    return _chain(ctx, "Min")


@converter("Sum", since_version=8)
def total(ctx: ConvertContext) -> str:
    return _chain(ctx, "Add")


@converter("Mean", since_version=8)
def mean(ctx: ConvertContext) -> str:
    summed = _chain(ctx, "Add")
    if len(ctx.inputs) == 1:
        return summed
    return ctx.emit1("Div", [summed, ctx.scalar_like(len(ctx.inputs), summed)])
