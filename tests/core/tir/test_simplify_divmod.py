"""floordiv/floormod by a constant that shares a factor with the index's coefficients: x = g*H + L with
0 <= L < g and g | c gives x // c = H // (c/g) and x % c = g*(H % (c/g)) + L (reshape chains, channel shuffle)."""
from __future__ import annotations

import itertools

import pytest

from core.tir.expr import BinOp, Expr, IntImm, Var
from core.tir.functor import walk_expr
from core.tir.simplify import simplify

c, h, w = Var("c"), Var("h"), Var("w")


def _eval(e: Expr, env: dict) -> int:
    if isinstance(e, IntImm):
        return e.value
    if isinstance(e, Var):
        return env[e]
    a, b = _eval(e.a, env), _eval(e.b, env)
    ops = {"add": int.__add__, "sub": int.__sub__, "mul": int.__mul__, "floordiv": int.__floordiv__,
           "floormod": int.__mod__}
    return ops[e.op](a, b)


def _vars(e: Expr) -> set:
    return {x for x in walk_expr(e) if isinstance(x, Var)}


def test_a_reshapes_flat_index_divided_by_two_channels_is_the_channel_halved():
    # shufflenet's shuffle: (1, 116, 28, 28) -> (1, 2, 58, 28, 28), the channel-group index of a pixel
    flat, ranges = c * 784 + h * 28 + w, {c: (0, 115), h: (0, 27), w: (0, 27)}
    div = simplify(BinOp("floordiv", flat, IntImm(1568)), ranges)
    assert str(div) == "(c // 2)"
    mod = simplify(BinOp("floormod", flat, IntImm(1568)), ranges)
    assert _vars(mod) == {c, h, w} and "1568" not in str(mod)


@pytest.mark.parametrize("coeffs, const, divisor", [((12, 3, 1), 0, 24), ((12, 3, 1), 5, 24), ((-8, 4, 1), 2, 16),
                                                    ((6, 1, 0), 1, 4), ((10, 1, 0), 0, 20)])
def test_simplified_division_and_remainder_equal_python_on_every_point(coeffs, const, divisor):
    ranges = {c: (-3, 5), h: (0, 2), w: (0, 0)}
    x = c * coeffs[0] + h * coeffs[1] + w * coeffs[2] + const
    for op, ref in (("floordiv", lambda v: v // divisor), ("floormod", lambda v: v % divisor)):
        simplified = simplify(BinOp(op, x, IntImm(divisor)), ranges)
        for point in itertools.product(*(range(lo, hi + 1) for lo, hi in ranges.values())):
            env = dict(zip(ranges, point))
            assert _eval(simplified, env) == ref(_eval(x, env)), (op, str(simplified), env)


def test_without_a_provable_remainder_range_the_division_stays():
    x = c * 784 + h * 28 + w
    assert str(simplify(BinOp("floordiv", x, IntImm(1568)), {c: (0, 115), h: (0, 27)})).endswith("// 1568)")  # w?
    # h reaches 28 (h*28 + w up to 811): only the factor 28 splits off, w < 28
    assert str(simplify(BinOp("floordiv", x, IntImm(1568)), {c: (0, 115), h: (0, 28), w: (0, 27)})) == \
        "(((c * 28) + h) // 56)"
