"""specialize: one unrolled copy of a loop body, with the selects its loop variable decides replaced
by their chosen arm (how Winograd transforms' tables of arms are emitted)."""
from __future__ import annotations

from core.tir.expr import Buffer, FloatImm, IntImm, Load, Select, Var, eq
from core.tir.functor import walk_expr
from core.tir.simplify import specialize
from core.tir.stmt import Store

k, j = Var("k"), Var("j")
src, dst = Buffer("src", (64,), "float32"), Buffer("dst", (64,), "float32")


def _table(index):
    """select(index == 0, src[0], select(index == 1, src[1] + src[2], ... src[3] * 2))"""
    arms = [Load(src, IntImm(0)), Load(src, IntImm(1)) + Load(src, IntImm(2)), Load(src, IntImm(3)) * FloatImm(2.0, "float32")]
    out = arms[-1]
    for n in range(len(arms) - 2, -1, -1):
        out = Select(eq(index, n), arms[n], out)
    return out, arms


def test_each_copy_keeps_only_its_arm_and_the_loop_variable_becomes_a_constant():
    table, arms = _table(k)
    body = Store(dst, k * 8 + j, table)
    for value, arm in enumerate(arms):
        copy = specialize(body, k, value)
        assert copy.value == arm
        assert str(copy.index) == str(IntImm(value) * 8 + j)
        assert not any(isinstance(e, Select) for e in walk_expr(copy.value))


def test_a_select_the_variable_does_not_decide_stays_with_both_arms_specialized():
    table, _ = _table(k + j)  # decided only once j is known too (an inner unrolled loop)
    copy = specialize(Store(dst, j, table), k, 1)
    assert isinstance(copy.value, Select) and k not in set(walk_expr(copy.value))
    assert specialize(copy, j, 0).value == Load(src, IntImm(1)) + Load(src, IntImm(2))
