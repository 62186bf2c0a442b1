"""LSTMSequence and GRUSequence as one loop program each (te.extern): a serial loop over the steps, and in
each step, per block of units (in parallel), the recurrent product of the previous state with the block's
packed weight columns and the gates, so the gate pre-activations never leave the block's accumulators.
The op definitions (core/graph/op_defs/recurrent.py) say the layouts."""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

from ..graph.ir import TensorType
from ..graph.op_defs.recurrent import GRU_GATES, LSTM_GATES
from ..te import tensor as te
from ..tir.expr import Buffer, Expr, Var, call, cast, const, select
from ..tir.stmt import Allocate, For, ForKind, Stmt, Store, seq
from .common import require
from .registry import register_compute


def _i(value) -> Expr:
    return const(int(value), "int64")


def _loop(name: str, extent: int, kind: ForKind, body: Callable[[Var], Stmt]) -> Stmt:
    var = Var(name)
    return For(var, _i(extent), kind if extent > 1 else ForKind.SERIAL, body(var))


def _sigmoid(x: Expr) -> Expr:
    one = const(1, x.dtype)
    return one / (one + call("exp", -x))


class RecurrentProgram:
    """One direction of an LSTM (`states` = 2: h and c) or a linear-before-reset GRU (`states` = 1)."""

    def __init__(self, gates: int, states: int, seq: int, batch: int, hidden: int, block: int, reverse: bool,
                 has_lengths: bool):
        self.gates, self.states, self.seq, self.batch, self.hidden = gates, states, seq, batch, hidden
        self.block, self.reverse, self.has_lengths = block, reverse, has_lengths

    def state_index(self, slot: Expr, which: int, b: Expr, u: Expr) -> Expr:
        """out[slot, (which,) b, u]: `which` 0 is h, 1 is c (LSTM)."""
        return ((slot * _i(self.states) + _i(which)) * _i(self.batch) + b) * _i(self.hidden) + u

    def program(self, ins: list[Buffer], out: Buffer) -> Stmt:
        initial = ins[2:4] if self.states == 2 else ins[3:4]
        first = _i(self.seq if self.reverse else 0)
        copy_in = [_loop("rnn_b", self.batch, ForKind.SERIAL, lambda b, w=w, s=s: _loop(
            "rnn_u", self.hidden, ForKind.VECTORIZED,
            lambda u: Store(out, self.state_index(first, w, b, u), s.load(b * _i(self.hidden) + u))))
            for w, s in enumerate(initial)]

        def step(s: Var) -> Stmt:
            t = _i(self.seq - 1) - s if self.reverse else s
            read, write = (t + _i(1), t) if self.reverse else (t, t + _i(1))
            return _loop("rnn_blk", self.hidden // self.block, ForKind.PARALLEL,
                         lambda blk: self.block_step(ins, out, t, read, write, blk))
        return seq(*copy_in, _loop("rnn_s", self.seq, ForKind.SERIAL, step))

    def block_step(self, ins: list[Buffer], out: Buffer, t: Expr, read: Expr, write: Expr, blk: Var) -> Stmt:
        projected, rp = ins[0], ins[1]
        lengths = ins[-1] if self.has_lengths else None
        g_count, hidden, lanes, dtype = self.gates, self.hidden, self.block, out.dtype
        acc = Buffer("rnn_acc", (g_count * lanes,), dtype, "local")
        gru = self.states == 1

        def unit(l: Expr) -> Expr:
            return blk * _i(lanes) + l

        def at(g: int, l: Expr) -> Expr:  # gate g's accumulator of lane l
            return _i(g * lanes) + l

        def per_row(b: Var) -> Stmt:
            def x(g: int, l: Expr) -> Expr:  # the step's input projection of gate g
                return projected.load((t * _i(self.batch) + b) * _i(g_count * hidden) + _i(g * hidden) + unit(l))

            def lanes_loop(body: Callable[[Var], Stmt]) -> Stmt:
                return _loop("rnn_l", lanes, ForKind.VECTORIZED, body)

            def init(g: int) -> Stmt:  # the GRU's candidate takes its recurrent bias now, its input after the reset
                start = (lambda l: ins[2].load(unit(l))) if gru and g == 2 else (lambda l: x(g, l))
                return lanes_loop(lambda l: Store(acc, at(g, l), start(l)))

            def product(k: Var) -> Stmt:
                h_k = out.load(self.state_index(read, 0, b, k))
                row = (blk * _i(hidden) + k) * _i(g_count)  # packed R [H/L, H, G, L]: block blk, row k
                weight = lambda g, l: rp.load((row + _i(g)) * _i(lanes) + l)  # noqa: E731
                return seq(*[lanes_loop(lambda l, g=g: Store(acc, at(g, l), acc.load(at(g, l)) + h_k * weight(g, l)))
                             for g in range(g_count)])

            def keep(l: Expr, which: int, new: Expr) -> Expr:  # a step past the row's length keeps the state
                if lengths is None:
                    return new
                live = t < cast("int64", lengths.load(b))
                return select(live, new, out.load(self.state_index(read, which, b, unit(l))))

            a = lambda g, l: acc.load(at(g, l))  # noqa: E731
            if gru:  # z, r, h~ = tanh(x_h + r * (h R_h^T + Rb_h)), then h = h~ + z (h_prev - h~)
                candidate = lanes_loop(lambda l: Store(acc, at(2, l),
                                                       call("tanh", x(2, l) + _sigmoid(a(1, l)) * a(2, l))))
                h_prev = lambda l: out.load(self.state_index(read, 0, b, unit(l)))  # noqa: E731
                new_h = lanes_loop(lambda l: Store(out, self.state_index(write, 0, b, unit(l)), keep(
                    l, 0, a(2, l) + _sigmoid(a(0, l)) * (h_prev(l) - a(2, l)))))
                gates = seq(candidate, new_h)
            else:  # i, o, f, c: c = f c_prev + i tanh(x_c), h = o tanh(c)
                c_prev = lambda l: out.load(self.state_index(read, 1, b, unit(l)))  # noqa: E731
                cell = lanes_loop(lambda l: Store(acc, at(3, l), _sigmoid(a(2, l)) * c_prev(l)
                                                  + _sigmoid(a(0, l)) * call("tanh", a(3, l))))
                new_c = lanes_loop(lambda l: Store(out, self.state_index(write, 1, b, unit(l)), keep(l, 1, a(3, l))))
                new_h = lanes_loop(lambda l: Store(out, self.state_index(write, 0, b, unit(l)), keep(
                    l, 0, _sigmoid(a(1, l)) * call("tanh", a(3, l)))))
                gates = seq(cell, new_c, new_h)
            return seq(*[init(g) for g in range(g_count)], _loop("rnn_k", hidden, ForKind.SERIAL, product), gates)

        return Allocate(acc, _loop("rnn_b", self.batch, ForKind.SERIAL, per_row))


def _register(op: str, gates: int, states: int) -> None:
    @register_compute(op)
    def compute(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
        projected, rp = require(inputs, 2, op)
        tensors = [t for t in inputs if t is not None]
        seq_len, batch, _ = projected.shape
        _, hidden, _, block = rp.shape
        program = RecurrentProgram(gates, states, seq_len, batch, hidden, block, bool(attrs.get("reverse", 0)),
                                   len(tensors) == 5)
        shape = (seq_len + 1,) + ((2,) if states == 2 else ()) + (batch, hidden)
        return [te.extern(shape, tensors, program.program, projected.dtype, name=op.lower())]


_register("LSTMSequence", LSTM_GATES, 2)
_register("GRUSequence", GRU_GATES, 1)
