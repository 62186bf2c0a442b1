"""Writes a GPT-2-style decoder (pre-norm blocks: LayerNorm, causal softmax attention, GELU-tanh MLP
as GPT-2's exporter spells it: Mul/Pow(x, 3)/Tanh) built with onnx.helper, for bench_models.py.

    .venv/bin/python bench/gpt2_block.py -o /tmp/gpt2_block.onnx [--layers 2 --seq 128 --dim 384 --heads 6]
    .venv/bin/python bench/bench_models.py --model /tmp/gpt2_block.onnx
"""
from __future__ import annotations

import argparse
import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Builder:
    def __init__(self, seed: int) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)
        self.count = 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, value, hint: str = "c") -> str:
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, shape: tuple[int, ...], scale: float) -> str:
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32), "w")

    def op(self, op_type: str, *inputs: str, **attrs) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def layer_norm(self, x: str, dim: int) -> str:
        gamma = self.const((1 + 0.1 * self.rng.standard_normal(dim)).astype(np.float32), "gamma")
        beta = self.const((0.1 * self.rng.standard_normal(dim)).astype(np.float32), "beta")
        return self.op("LayerNormalization", x, gamma, beta, axis=-1, epsilon=1e-5)

    def linear(self, x: str, d_in: int, d_out: int) -> str:
        return self.op("Add", self.op("MatMul", x, self.weight((d_in, d_out), 1 / math.sqrt(d_in))),
                       self.weight((d_out,), 0.02))

    def gelu_tanh(self, x: str) -> str:
        """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), node for node as GPT-2's export."""
        cube = self.op("Pow", x, self.const(np.float32(3.0), "three"))
        inner = self.op("Add", x, self.op("Mul", cube, self.const(np.float32(0.044715))))
        t = self.op("Tanh", self.op("Mul", inner, self.const(np.float32(math.sqrt(2 / math.pi)))))
        half_x = self.op("Mul", x, self.const(np.float32(0.5)))
        return self.op("Mul", half_x, self.op("Add", t, self.const(np.float32(1.0))))


def build(layers: int, seq: int, dim: int, heads: int, seed: int = 0) -> onnx.ModelProto:
    b = _Builder(seed)
    head = dim // heads
    causal = b.const(np.tril(np.ones((1, 1, seq, seq), dtype=bool)), "causal")
    masked_value = b.const(np.float32(np.finfo(np.float32).min), "mask_value")
    split_shape = b.const(np.array([1, seq, heads, head], dtype=np.int64), "shape")
    merge_shape = b.const(np.array([1, seq, dim], dtype=np.int64), "shape")
    scale = b.const(np.float32(1 / math.sqrt(head)), "scale")
    x = "hidden"
    for _ in range(layers):
        h = b.layer_norm(x, dim)
        qkv = [b.op("Transpose", b.op("Reshape", b.linear(h, dim, dim), split_shape), perm=perm)
               for perm in ([0, 2, 1, 3], [0, 2, 3, 1], [0, 2, 1, 3])]
        scores = b.op("Mul", b.op("MatMul", qkv[0], qkv[1]), scale)
        probs = b.op("Softmax", b.op("Where", causal, scores, masked_value), axis=-1)
        context = b.op("Reshape", b.op("Transpose", b.op("MatMul", probs, qkv[2]), perm=[0, 2, 1, 3]), merge_shape)
        x = b.op("Add", x, b.linear(context, dim, dim))
        mlp = b.linear(b.gelu_tanh(b.linear(b.layer_norm(x, dim), dim, 4 * dim)), 4 * dim, dim)
        x = b.op("Add", x, mlp)
    out = b.op("Identity", b.layer_norm(x, dim))
    graph = helper.make_graph(b.nodes, "gpt2_block",
                              [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [1, seq, dim])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, seq, dim])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--heads", type=int, default=6)
    args = parser.parse_args()
    onnx.save(build(args.layers, args.seq, args.dim, args.heads), args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
