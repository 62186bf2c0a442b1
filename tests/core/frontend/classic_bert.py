"""A tiny BERT in the classic exported pattern (what torch's TorchScript exporter wrote for Hugging Face
BertModel): embeddings + LayerNorm, Q/K/V projections split into heads, scaled scores plus the
(1 - mask) * -10000 bias, softmax, erf GELU. ONNX Runtime's transformer optimizer fuses it into
EmbedLayerNormalization, Attention, SkipLayerNormalization and BiasGelu."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def classic_bert(batch: int = 1, seq: int = 16, vocab: int = 100, hidden: int = 32, heads: int = 2,
                 layers: int = 2, ffn: int = 64, seed: int = 3) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    counter = [0]

    def name(base: str) -> str:
        counter[0] += 1
        return f"{base}_{counter[0]}"

    def const(value, base: str = "c") -> str:
        n = name(base)
        inits.append(numpy_helper.from_array(np.asarray(value), n))
        return n

    def weight(*shape, scale=0.1) -> str:
        return const((rng.standard_normal(shape) * scale).astype(np.float32), "w")

    def node(op: str, inputs, **attrs) -> str:
        out = name(op.lower())
        nodes.append(helper.make_node(op, list(inputs), [out], name=out, **attrs))
        return out

    def layer_norm(x: str) -> str:
        return node("LayerNormalization", [x, const(np.ones(hidden, np.float32) + rng.standard_normal(hidden)
                                                     .astype(np.float32) * 0.1, "gamma"), weight(hidden)],
                    axis=-1, epsilon=1e-12)

    def dense(x: str, cin: int, cout: int) -> str:
        return node("Add", [node("MatMul", [x, weight(cin, cout)]), weight(cout)])

    head = hidden // heads
    split = const(np.array([0, 0, heads, head], np.int64), "shape")
    merge = const(np.array([0, 0, hidden], np.int64), "shape")
    positions = const(np.arange(seq, dtype=np.int64).reshape(1, seq), "position_ids")
    word = node("Gather", [weight(vocab, hidden), "input_ids"])
    pos = node("Gather", [weight(seq, hidden), positions])
    seg = node("Gather", [weight(2, hidden), "token_type_ids"])
    h = layer_norm(node("Add", [node("Add", [word, pos]), seg]))
    mask = node("Unsqueeze", [node("Unsqueeze", ["attention_mask", const(np.array([1], np.int64), "axes")]),
                              const(np.array([2], np.int64), "axes")])
    mask = node("Cast", [mask], to=TensorProto.FLOAT)
    mask = node("Mul", [node("Sub", [const(np.array(1.0, np.float32), "one"), mask]),
                        const(np.array(-10000.0, np.float32), "big")])
    for _ in range(layers):
        q = node("Transpose", [node("Reshape", [dense(h, hidden, hidden), split])], perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [dense(h, hidden, hidden), split])], perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [dense(h, hidden, hidden), split])], perm=[0, 2, 1, 3])
        scores = node("Div", [node("MatMul", [q, k]), const(np.array(np.sqrt(head), np.float32), "sqrt")])
        probs = node("Softmax", [node("Add", [scores, mask])], axis=-1)
        context = node("Reshape", [node("Transpose", [node("MatMul", [probs, v])], perm=[0, 2, 1, 3]), merge])
        h = layer_norm(node("Add", [dense(context, hidden, hidden), h]))
        up = dense(h, hidden, ffn)
        erf = node("Erf", [node("Div", [up, const(np.array(1.4142135, np.float32), "sqrt2")])])
        gelu = node("Mul", [node("Mul", [up, node("Add", [erf, const(np.array(1.0, np.float32), "one")])]),
                            const(np.array(0.5, np.float32), "half")])
        h = layer_norm(node("Add", [dense(gelu, ffn, hidden), h]))
    nodes.append(helper.make_node("Identity", [h], ["last_hidden_state"]))
    ints = [helper.make_tensor_value_info(n, TensorProto.INT64, [batch, seq])
            for n in ("input_ids", "attention_mask", "token_type_ids")]
    out = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [batch, seq, hidden])
    model = helper.make_model(helper.make_graph(nodes, "bert", ints, [out], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model
