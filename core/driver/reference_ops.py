"""Exact numpy evaluations of quantized ops ONNX Runtime computes inexactly and no float rewrite can express
(com.microsoft DynamicQuantizeLSTM), as onnx.reference ops for core/driver/reference.py's evaluator."""
from __future__ import annotations

import numpy as np
from onnx.reference.op_run import OpRun


def dynamic_quantize(x: np.ndarray) -> tuple[np.ndarray, np.float32, int]:
    """ONNX DynamicQuantizeLinear (the range widened to include 0) with the quantized values as int64."""
    low, high = min(float(x.min(initial=0.0)), 0.0), max(float(x.max(initial=0.0)), 0.0)
    scale = np.float32((high - low) / 255) if high != low else np.float32(1)
    zero = int(np.clip(np.round(np.float32(0) - np.float32(low) / scale), 0, 255))
    return np.clip(np.round(x / scale) + zero, 0, 255).astype(np.int64), scale, zero


def quantized_product(x: np.ndarray, weights: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """x @ dequantized weights the way the op defines it: x quantized per call to uint8, the integer product exact
    (int64), scaled by both scales (per tensor or per column)."""
    q, x_scale, x_zero = dynamic_quantize(x)
    integer = (q - x_zero) @ (weights.astype(np.int64) - np.asarray(zero, np.int64))
    return integer.astype(np.float32) * (x_scale * np.asarray(scale, np.float32))


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-v))


class DynamicQuantizeLSTM(OpRun):
    """com.microsoft DynamicQuantizeLSTM: an LSTM (gates i, o, f, c; sigmoid and tanh) whose W [D, I, 4H] and
    R [D, H, 4H] are int8 with per-direction scales and zero points (per tensor or per column), each product's float
    operand quantized to uint8 when it is used."""

    op_domain = "com.microsoft"

    def _run(self, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None, w_scale=None,
             w_zero_point=None, r_scale=None, r_zero_point=None, direction=None, hidden_size=None,
             activations=None, clip=None, input_forget=None, **_):
        if (activations and [a.lower() if isinstance(a, str) else a.decode().lower() for a in activations]
                != ["sigmoid", "tanh", "tanh"] * (len(activations) // 3)) or clip or input_forget or p is not None \
                or sequence_lens is not None:
            raise NotImplementedError("the exact DynamicQuantizeLSTM reference takes default activations, no clip, "
                                      "peepholes or sequence lengths")
        seq, batch, _ = x.shape
        directions, hidden = r.shape[0], r.shape[1]
        reverse = (direction.decode() if isinstance(direction, bytes) else direction or "forward") == "reverse"
        ys, hs, cs = [], [], []
        for d in range(directions):
            bias = b[d] if b is not None else np.zeros(8 * hidden, np.float32)
            projected = quantized_product(x.reshape(seq * batch, -1), w[d], w_scale[d], w_zero_point[d])
            projected = projected.reshape(seq, batch, 4 * hidden) + (bias[:4 * hidden] + bias[4 * hidden:])
            h = initial_h[d] if initial_h is not None else np.zeros((batch, hidden), np.float32)
            c = initial_c[d] if initial_c is not None else np.zeros((batch, hidden), np.float32)
            out = [None] * seq
            for t in range(seq - 1, -1, -1) if d == 1 or reverse else range(seq):
                gates = projected[t] + quantized_product(h, r[d], r_scale[d], r_zero_point[d])
                i, o, f, cell = np.split(gates, 4, axis=-1)
                c = (_sigmoid(f) * c + _sigmoid(i) * np.tanh(cell)).astype(np.float32)
                h = (_sigmoid(o) * np.tanh(c)).astype(np.float32)
                out[t] = h
            ys.append(np.stack(out))
            hs.append(h)
            cs.append(c)
        return np.stack(ys, 1), np.stack(hs), np.stack(cs)


EVALUATED = {"DynamicQuantizeLSTM": DynamicQuantizeLSTM}  # op -> its exact implementation
