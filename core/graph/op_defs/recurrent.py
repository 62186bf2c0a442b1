"""LSTMSequence and GRUSequence: one direction of an LSTM or GRU layer over its whole sequence, the input
projection done before (one MatMul over every step), each step's recurrent product and gates one pass.

The recurrent weight comes in blocks of units: R [G*H, H] (ONNX's gate-major rows) as [H/L, H, G, L], so
that one block of L units reads its G gates' columns contiguously for every k (`pack_recurrent_weight`).
The output holds every step's state in time order plus the initial one: [S + 1, (2,) B, H], slot 0 the
initial state and slot t + 1 the state after step t going forward; going in reverse, slot S is the initial
state and slot t the state after step t. Steps at or past a row's sequence length keep its state.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, register_op

from ._common import FLOAT_DTYPES, expect_arity, expect_dtype

LSTM_GATES, GRU_GATES = 4, 3  # i, o, f, c and z, r, h: ONNX's order of the gates in W, R and B


def unit_block(hidden: int, lanes: int = 16) -> int:
    """Units per block of the packed recurrent weight: the largest divisor of `hidden` up to `lanes`."""
    return next(b for b in range(min(lanes, hidden), 0, -1) if hidden % b == 0)


def pack_recurrent_weight(r: np.ndarray, gates: int, block: int) -> np.ndarray:
    """R [G*H, H] -> [H/L, H, G, L]: block, k, gate, unit within the block (as the converter's Reshape and
    Transpose compute it)."""
    hidden = r.shape[1]
    return np.ascontiguousarray(r.reshape(gates, hidden // block, block, hidden).transpose(1, 3, 0, 2))


def _unpack(rp: np.ndarray) -> np.ndarray:
    """The inverse of pack_recurrent_weight, transposed: R^T [H, G*H]."""
    blocks, hidden, gates, block = rp.shape
    return rp.transpose(1, 2, 0, 3).reshape(hidden, gates * blocks * block)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _steps(seq: int, reverse: bool) -> list[tuple[int, int, int]]:
    """(time step, slot read, slot written) in processing order."""
    return [(t, t + 1, t) for t in range(seq - 1, -1, -1)] if reverse else [(t, t, t + 1) for t in range(seq)]


def _live(lens, t: int, batch: int) -> np.ndarray:
    return np.ones((batch, 1), bool) if lens is None else (t < np.asarray(lens))[:, None]


def lstm_reference(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    projected, rp, h0, c0 = (np.asarray(a, np.float64) for a in inputs[:4])
    lens = inputs[4] if len(inputs) > 4 else None
    seq, batch, _ = projected.shape
    hidden = h0.shape[1]
    rt = _unpack(rp)
    out = np.zeros((seq + 1, 2, batch, hidden))
    reverse = bool(attrs.get("reverse", 0))
    out[seq if reverse else 0] = h0, c0
    for t, read, write in _steps(seq, reverse):
        h, c = out[read]
        i, o, f, cc = np.split(projected[t] + h @ rt, LSTM_GATES, axis=1)
        c_new = _sigmoid(f) * c + _sigmoid(i) * np.tanh(cc)
        h_new = _sigmoid(o) * np.tanh(c_new)
        live = _live(lens, t, batch)
        out[write] = np.where(live, h_new, h), np.where(live, c_new, c)
    return [out.astype(inputs[0].dtype)]


def gru_reference(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    """linear_before_reset's GRU: h~ = tanh(x_h + r * (h R_h^T + Rb_h))."""
    projected, rp, rb_h, h0 = (np.asarray(a, np.float64) for a in inputs[:4])
    lens = inputs[4] if len(inputs) > 4 else None
    seq, batch, _ = projected.shape
    hidden = h0.shape[1]
    rt = _unpack(rp)
    out = np.zeros((seq + 1, batch, hidden))
    reverse = bool(attrs.get("reverse", 0))
    out[seq if reverse else 0] = h0
    for t, read, write in _steps(seq, reverse):
        h = out[read]
        x_z, x_r, x_h = np.split(projected[t], GRU_GATES, axis=1)
        h_z, h_r, h_h = np.split(h @ rt, GRU_GATES, axis=1)
        z, r = _sigmoid(x_z + h_z), _sigmoid(x_r + h_r)
        candidate = np.tanh(x_h + r * (h_h + rb_h))
        out[write] = np.where(_live(lens, t, batch), candidate + z * (h - candidate), h)
    return [out.astype(inputs[0].dtype)]


def _flops(gates: int):
    def count(inputs: Sequence, outputs: Sequence[TensorType], attrs: Mapping) -> int:
        seq, batch, _ = inputs[0].shape
        hidden = inputs[1].shape[1]
        return seq * batch * gates * hidden * (2 * hidden + 8)
    return count


def _check(op: str, types: Sequence[TensorType], gates: int) -> tuple[int, int, int]:
    projected, rp = types[:2]
    expect_dtype(op, projected, FLOAT_DTYPES)
    if projected.rank != 3 or rp.rank != 4:
        raise ShapeError(f"{op}: projected [S, B, G*H] and packed R [H/L, H, G, L] expected, got {projected}, {rp}")
    seq, batch, width = projected.shape
    blocks, hidden, g, block = rp.shape
    if g != gates or blocks * block != hidden or width != gates * hidden:
        raise ShapeError(f"{op}: projected {projected} and packed R {rp} disagree on {gates} gates of H units")
    if len(types) == 5 and (types[4].shape != (batch,) or types[4].dtype != "int32"):
        raise ShapeError(f"{op}: sequence lengths must be int32 [{batch}], got {types[4]}")
    return seq, batch, hidden


@register_op("LSTMSequence", Pattern.OPAQUE, fold=lstm_reference, flops=_flops(LSTM_GATES))
def _lstm_sequence(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    """Inputs projected [S, B, 4H] (X W^T + both biases), packed R, h0 [B, H], c0 [B, H], optional sequence
    lengths [B] int32; attrs reverse (0/1). Output [S + 1, 2, B, H]: h and c after each step."""
    expect_arity("LSTMSequence", types, 4, 5)
    seq, batch, hidden = _check("LSTMSequence", types, LSTM_GATES)
    for state in types[2:4]:
        if state.shape != (batch, hidden):
            raise ShapeError(f"LSTMSequence: an initial state must be [B, H] = [{batch}, {hidden}], got {state}")
    return [TensorType((seq + 1, 2, batch, hidden), types[0].dtype)]


@register_op("GRUSequence", Pattern.OPAQUE, fold=gru_reference, flops=_flops(GRU_GATES))
def _gru_sequence(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    """Inputs projected [S, B, 3H] (X W^T + W's biases, plus R's for z and r), packed R, the candidate's
    recurrent bias [H], h0 [B, H], optional sequence lengths [B] int32; attrs reverse (0/1); the reset
    gate applies after the recurrent product (linear_before_reset). Output [S + 1, B, H]."""
    expect_arity("GRUSequence", types, 4, 5)
    seq, batch, hidden = _check("GRUSequence", types, GRU_GATES)
    if types[2].shape != (hidden,) or types[3].shape != (batch, hidden):
        raise ShapeError(f"GRUSequence: the recurrent bias must be [{hidden}] and h0 [{batch}, {hidden}], "
                         f"got {types[2]}, {types[3]}")
    return [TensorType((seq + 1, batch, hidden), types[0].dtype)]
