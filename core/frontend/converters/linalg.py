"""MatMul (vectors reshaped to matrices and back) and Gemm decomposed into Transpose/MatMul/Mul/Add."""
from __future__ import annotations

from .registry import ConvertContext, converter


def matmul(ctx: ConvertContext, a: str, b: str, op: str = "MatMul", extra_inputs: tuple[str, ...] = ()) -> str:
    """`op` with a and b (then `extra_inputs`): MatMul, or MatMulInteger with its zero points."""
    a_shape, b_shape = ctx.builder.type_of(a).shape, ctx.builder.type_of(b).shape
    if not a_shape or not b_shape:
        ctx.fail("MatMul operands must not be scalars")
    # numpy rules: a vector on the left is a row, on the right a column; that axis is dropped again.
    a2 = ctx.reshape(a, (1,) + a_shape) if len(a_shape) == 1 else a
    b2 = ctx.reshape(b, b_shape + (1,)) if len(b_shape) == 1 else b
    y = ctx.emit1(op, [a2, b2, *extra_inputs])
    shape = ctx.builder.type_of(y).shape
    if len(b_shape) == 1:
        shape = shape[:-1]
    if len(a_shape) == 1:
        shape = shape[:-2] + shape[-1:] if len(b_shape) > 1 else shape[:-1]
    return ctx.reshape(y, shape)


@converter("MatMul", since_version=1)
def matmul_op(ctx: ConvertContext) -> str:
    return matmul(ctx, ctx.input(0), ctx.input(1))


@converter("Gemm", since_version=7)
def gemm(ctx: ConvertContext) -> str:
    a, b = ctx.input(0), ctx.input(1)
    if ctx.type_of(0).rank != 2 or ctx.type_of(1).rank != 2:
        ctx.fail(f"Gemm operands must be matrices, got {ctx.type_of(0)} and {ctx.type_of(1)}")
    if ctx.attr("transA", 0):
        a = ctx.emit1("Transpose", [a], perm=(1, 0))
    if ctx.attr("transB", 0):
        b = ctx.emit1("Transpose", [b], perm=(1, 0))
    y = ctx.emit1("MatMul", [a, b])
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    if alpha != 1.0:
        y = ctx.emit1("Mul", [y, ctx.scalar_like(alpha, y)])
    if ctx.has_input(2) and beta != 0.0:
        c = ctx.input(2)
        if beta != 1.0:
            c = ctx.emit1("Mul", [c, ctx.scalar_like(beta, c)])
        y = ctx.emit1("Add", [y, c])
    return y
