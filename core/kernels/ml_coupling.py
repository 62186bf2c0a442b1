"""PairwiseCoupling: SVM class probabilities from pairwise ones, libsvm's fixed-point iteration (at most
COUPLING_ITERATIONS, stopping when the residual falls under 0.005 / k) as one sequential program per row, in
ONNX Runtime's float32 order of operations (see core/graph/op_defs/ml.py pairwise_coupling, the reference)."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..graph.op_defs.ml import COUPLING_ITERATIONS
from ..te import tensor as te
from ..tir.expr import Buffer, Expr, Var, call, const, eq, select
from ..tir.stmt import Allocate, For, ForKind, IfThenElse, Stmt, Store, seq
from .common import require
from .registry import register_compute

F32 = "float32"


def _f(value: float) -> Expr:
    return const(value, F32)


def _i(value: int) -> Expr:
    return const(value, "int64")


class _CouplingProgram:
    """Per row: Q (k x k) from r, then p refined in place; scalars live in a small local array."""

    def __init__(self, r: Buffer, out: Buffer, rows: int, k: int):
        self.r, self.out, self.rows, self.k = r, out, rows, k
        self.q = Buffer("coupling_q", (k * k,), F32, "local")
        self.qp = Buffer("coupling_qp", (k,), F32, "local")
        self.p = Buffer("coupling_p", (k,), F32, "local")
        # pQp, the largest residual, the step, and whether the row has converged
        self.s = Buffer("coupling_scalars", (4,), F32, "local")

    def loop(self, name: str, extent: int, body) -> Stmt:
        var = Var(name)
        return For(var, _i(extent), ForKind.SERIAL, body(var))

    def scalar(self, slot: int) -> Expr:
        return self.s.load(_i(slot))

    def set_scalar(self, slot: int, value: Expr) -> Stmt:
        return Store(self.s, _i(slot), value)

    def build_q(self, row: Var) -> Stmt:
        k, q = self.k, self.q

        def r(i: Expr, j: Expr) -> Expr:
            return self.r.load(row * _i(k * k) + i * _i(k) + j)

        def entry(i: Var, j: Var) -> Stmt:
            diagonal = i * _i(k + 1)
            add = Store(q, diagonal, q.load(diagonal) + r(j, i) * r(j, i))
            below = seq(add, Store(q, i * _i(k) + j, q.load(j * _i(k) + i)))
            above = seq(add, Store(q, i * _i(k) + j, (_f(0.0) - r(j, i)) * r(i, j)))
            return IfThenElse(j < i, below, IfThenElse(i < j, above))

        clear = self.loop("coupling_c", k * k, lambda c: Store(q, c, _f(0.0)))
        return seq(clear, self.loop("coupling_i", k, lambda i: seq(
            Store(self.p, i, _f(1.0) / _f(float(k))), self.loop("coupling_j", k, lambda j: entry(i, j)))))

    def residuals(self) -> Stmt:
        """Qp = Q p, pQp = p . Qp, and the largest |Qp[i] - pQp|."""
        k, q, qp, p = self.k, self.q, self.qp, self.p

        def row_of_qp(i: Var) -> Stmt:
            product = self.loop("coupling_j", k, lambda j: Store(qp, i, qp.load(i) + q.load(i * _i(k) + j) * p.load(j)))
            return seq(Store(qp, i, _f(0.0)), product, self.set_scalar(0, self.scalar(0) + p.load(i) * qp.load(i)))

        def largest(i: Var) -> Stmt:
            error = call("abs", qp.load(i) - self.scalar(0))
            return self.set_scalar(1, select(error > self.scalar(1), error, self.scalar(1)))

        return seq(self.set_scalar(0, _f(0.0)), self.loop("coupling_i", k, row_of_qp),
                   self.set_scalar(1, _f(0.0)), self.loop("coupling_i", k, largest))

    def update(self) -> Stmt:
        k, q, qp, p = self.k, self.q, self.qp, self.p

        def step(i: Var) -> Stmt:
            diagonal = q.load(i * _i(k + 1))
            diff, pqp = self.scalar(2), self.scalar(0)
            grown = _f(1.0) + diff
            spread = self.loop("coupling_j", k, lambda j: seq(
                Store(qp, j, (qp.load(j) + diff * q.load(i * _i(k) + j)) / grown),
                Store(p, j, p.load(j) / grown)))
            return seq(self.set_scalar(2, (_f(0.0) - qp.load(i) + pqp) / diagonal),
                       Store(p, i, p.load(i) + diff),
                       self.set_scalar(0, (pqp + diff * (diff * diagonal + _f(2.0) * qp.load(i))) / grown / grown),
                       spread)

        return self.loop("coupling_i", k, step)

    def row(self, row: Var) -> Stmt:
        k = self.k
        eps = _f(0.005) / _f(float(k))
        iteration = IfThenElse(eq(self.scalar(3), _f(0.0)), seq(
            self.residuals(),
            IfThenElse(self.scalar(1) < eps, self.set_scalar(3, _f(1.0)), self.update())))
        write = self.loop("coupling_i", k, lambda i: Store(self.out, row * _i(k) + i, self.p.load(i)))
        body = seq(self.build_q(row), self.set_scalar(3, _f(0.0)),
                   self.loop("coupling_iteration", COUPLING_ITERATIONS, lambda _: iteration), write)
        for buffer in (self.q, self.qp, self.p, self.s):
            body = Allocate(buffer, body)
        return body

    def build(self) -> Stmt:
        row = Var("coupling_row")
        return For(row, _i(self.rows), ForKind.PARALLEL if self.rows > 1 else ForKind.SERIAL, self.row(row))


@register_compute("PairwiseCoupling")
def pairwise_coupling(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    (r,) = require(inputs, 1, "PairwiseCoupling")
    rows, k = r.shape[0], r.shape[1]
    probabilities = te.extern((rows, k), [r], lambda ins, out: _CouplingProgram(ins[0], out, rows, k).build(), F32,
                              name="coupling")
    return [te.compute((rows, k), lambda n, c: probabilities(n, c), name="coupling_out", tag="injective")]
