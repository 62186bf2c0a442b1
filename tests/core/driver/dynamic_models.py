"""Small ONNX models with symbolic dims for the shape-bucket tests (onnx.helper, seeded weights)."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper as h, numpy_helper as nh


def _model(nodes, inputs, outputs, inits, opset: int = 17) -> bytes:
    graph = h.make_graph(nodes, "dyn", inputs, outputs, [nh.from_array(v, k) for k, v in inits.items()])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)]).SerializeToString()


def small_cnn(height="H", width="W", seed: int = 0) -> bytes:
    """x[N,3,H,W] -> conv 3x3 (4 channels) -> relu -> global average pool -> dense 5 -> softmax: y[N,5]."""
    rng = np.random.default_rng(seed)
    inits = {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "b": rng.standard_normal(4).astype(np.float32),
             "g": rng.standard_normal((4, 5)).astype(np.float32)}
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["a"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["a"], ["r"]),
             h.make_node("GlobalAveragePool", ["r"], ["p"]), h.make_node("Flatten", ["p"], ["f"]),
             h.make_node("MatMul", ["f", "g"], ["m"]), h.make_node("Softmax", ["m"], ["y"], axis=1)]
    return _model(nodes, [h.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, height, width])],
                  [h.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])], inits)


def tiny_encoder(vocab: int = 50, dim: int = 16, heads: int = 2, seed: int = 0) -> bytes:
    """input_ids[batch, seq] (int64) -> embedding -> one self-attention block (MatMul + Softmax) with a residual
    and LayerNormalization -> hidden[batch, seq, dim]."""
    rng = np.random.default_rng(seed)
    f32 = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    dh = dim // heads
    inits = {"emb": f32(vocab, dim), "wq": f32(dim, dim), "wk": f32(dim, dim), "wv": f32(dim, dim), "wo": f32(dim, dim),
             "gamma": np.ones(dim, np.float32), "beta": np.zeros(dim, np.float32),
             "heads_shape": np.array([0, 0, heads, dh], np.int64), "merge_shape": np.array([0, 0, dim], np.int64),
             "scale": np.array(1.0 / np.sqrt(dh), np.float32)}
    nodes = [h.make_node("Gather", ["emb", "input_ids"], ["x"])]
    for p in "qkv":
        nodes += [h.make_node("MatMul", ["x", f"w{p}"], [f"{p}0"]),
                  h.make_node("Reshape", [f"{p}0", "heads_shape"], [f"{p}1"]),
                  h.make_node("Transpose", [f"{p}1"], [p], perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3])]
    nodes += [h.make_node("MatMul", ["q", "k"], ["s0"]), h.make_node("Mul", ["s0", "scale"], ["s"]),
              h.make_node("Softmax", ["s"], ["attn"], axis=-1), h.make_node("MatMul", ["attn", "v"], ["c0"]),
              h.make_node("Transpose", ["c0"], ["c1"], perm=[0, 2, 1, 3]),
              h.make_node("Reshape", ["c1", "merge_shape"], ["c"]), h.make_node("MatMul", ["c", "wo"], ["o"]),
              h.make_node("Add", ["o", "x"], ["res"]),
              h.make_node("LayerNormalization", ["res", "gamma", "beta"], ["hidden"], axis=-1)]
    return _model(nodes, [h.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
                  [h.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "seq", dim])], inits)


def tiny_decoder(layers: int = 2, vocab: int = 32, dim: int = 8, heads: int = 2, positions: int = 64,
                 seed: int = 0) -> bytes:
    """A GPT-2-style decoder laid out as Hugging Face's export with use_cache=True: input_ids[batch_size,
    sequence_length], attention_mask[batch_size, past_sequence_length + sequence_length],
    past_key_values.N.key/value[batch_size, heads, past_sequence_length, head_dim] -> logits and
    present.N.key/value (past and new keys concatenated). Position ids are the past length plus
    Range(sequence_length); the causal mask is built from the shapes (key position <= query position)."""
    rng = np.random.default_rng(seed)
    f32 = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float32)  # noqa: E731
    dh = dim // heads
    inits = {"wte": f32(vocab, dim), "wpe": f32(positions, dim), "zero": np.array(0, np.int64),
             "one": np.array(1, np.int64), "heads_shape": np.array([0, 0, heads, dh], np.int64),
             "merge_shape": np.array([0, 0, dim], np.int64), "scale": np.array(1.0 / np.sqrt(dh), np.float32),
             "lowest": np.array(np.finfo(np.float32).min, np.float32), "ax0": np.array([0], np.int64),
             "ax1": np.array([1], np.int64), "ax12": np.array([1, 2], np.int64),
             "ln_g": np.ones(dim, np.float32), "ln_b": np.zeros(dim, np.float32)}
    batch, seq, past, total = "batch_size", "sequence_length", "past_sequence_length", \
        "past_sequence_length + sequence_length"
    inputs = [h.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, seq]),
              h.make_tensor_value_info("attention_mask", TensorProto.INT64, [batch, total])]
    outputs = [h.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, seq, vocab])]
    nodes = [h.make_node("Shape", ["input_ids"], ["seq_len1"], start=1, end=2),
             h.make_node("Squeeze", ["seq_len1"], ["seq_len"]),
             h.make_node("Shape", ["past_key_values.0.key"], ["past_len1"], start=2, end=3),
             h.make_node("Squeeze", ["past_len1"], ["past_len"]),
             h.make_node("Range", ["zero", "seq_len", "one"], ["iota"]),
             h.make_node("Add", ["iota", "past_len"], ["query_pos"]),
             h.make_node("Unsqueeze", ["query_pos", "ax0"], ["position_ids"]),
             h.make_node("Unsqueeze", ["query_pos", "ax1"], ["query_col"]),
             h.make_node("Gather", ["wte", "input_ids"], ["tok"]),
             h.make_node("Gather", ["wpe", "position_ids"], ["pos"]),
             h.make_node("Add", ["tok", "pos"], ["x0"]),
             h.make_node("Unsqueeze", ["attention_mask", "ax12"], ["mask4"]),
             h.make_node("Cast", ["mask4"], ["keep"], to=TensorProto.BOOL)]
    x = "x0"
    for i in range(layers):
        p = f"l{i}_"
        for name, shape in (("wq", (dim, dim)), ("wk", (dim, dim)), ("wv", (dim, dim)), ("wo", (dim, dim)),
                            ("w1", (dim, 4 * dim)), ("w2", (4 * dim, dim)), ("b1", (4 * dim,))):
            inits[p + name] = f32(*shape)
        past_k, past_v = f"past_key_values.{i}.key", f"past_key_values.{i}.value"
        inputs += [h.make_tensor_value_info(n, TensorProto.FLOAT, [batch, heads, past, dh]) for n in (past_k, past_v)]
        outputs += [h.make_tensor_value_info(f"present.{i}.{n}", TensorProto.FLOAT, [batch, heads, total, dh])
                    for n in ("key", "value")]
        nodes.append(h.make_node("LayerNormalization", [x, "ln_g", "ln_b"], [p + "h"], axis=-1))
        for t in "qkv":
            nodes += [h.make_node("MatMul", [p + "h", p + "w" + t], [p + t + "0"]),
                      h.make_node("Reshape", [p + t + "0", "heads_shape"], [p + t + "1"]),
                      h.make_node("Transpose", [p + t + "1"], [p + t], perm=[0, 2, 1, 3])]
        nodes += [h.make_node("Concat", [past_k, p + "k"], [f"present.{i}.key"], axis=2),
                  h.make_node("Concat", [past_v, p + "v"], [f"present.{i}.value"], axis=2),
                  h.make_node("Transpose", [f"present.{i}.key"], [p + "kt"], perm=[0, 1, 3, 2]),
                  h.make_node("MatMul", [p + "q", p + "kt"], [p + "s0"]),
                  h.make_node("Mul", [p + "s0", "scale"], [p + "s1"]),
                  h.make_node("Shape", [f"present.{i}.key"], [p + "total1"], start=2, end=3),
                  h.make_node("Squeeze", [p + "total1"], [p + "total"]),
                  h.make_node("Range", ["zero", p + "total", "one"], [p + "key_pos"]),
                  h.make_node("Unsqueeze", [p + "key_pos", "ax0"], [p + "key_row"]),
                  h.make_node("LessOrEqual", [p + "key_row", "query_col"], [p + "causal"]),
                  h.make_node("And", [p + "causal", "keep"], [p + "allowed"]),
                  h.make_node("Where", [p + "allowed", p + "s1", "lowest"], [p + "s"]),
                  h.make_node("Softmax", [p + "s"], [p + "attn"], axis=-1),
                  h.make_node("MatMul", [p + "attn", f"present.{i}.value"], [p + "c0"]),
                  h.make_node("Transpose", [p + "c0"], [p + "c1"], perm=[0, 2, 1, 3]),
                  h.make_node("Reshape", [p + "c1", "merge_shape"], [p + "c"]),
                  h.make_node("MatMul", [p + "c", p + "wo"], [p + "o"]),
                  h.make_node("Add", [x, p + "o"], [p + "x1"]),
                  h.make_node("LayerNormalization", [p + "x1", "ln_g", "ln_b"], [p + "h2"], axis=-1),
                  h.make_node("MatMul", [p + "h2", p + "w1"], [p + "m0"]),
                  h.make_node("Add", [p + "m0", p + "b1"], [p + "m1"]),
                  h.make_node("Relu", [p + "m1"], [p + "m2"]),
                  h.make_node("MatMul", [p + "m2", p + "w2"], [p + "m3"]),
                  h.make_node("Add", [p + "x1", p + "m3"], [p + "x2"])]
        x = p + "x2"
    nodes += [h.make_node("LayerNormalization", [x, "ln_g", "ln_b"], ["final"], axis=-1),
              h.make_node("Transpose", ["wte"], ["wte_t"], perm=[1, 0]),
              h.make_node("MatMul", ["final", "wte_t"], ["logits"])]
    return _model(nodes, inputs, outputs, inits)


def greedy_tokens(run, prompt, steps: int = 32, layers: int = 2, heads: int = 2, head_dim: int = 4):
    """Greedy generation with tiny_decoder's inputs and outputs: the prompt step with an empty cache (past length
    0), then one token a step, each step's present keys and values fed back as the next past. `run` maps feeds
    to outputs by name. Returns the tokens and every step's outputs."""
    ids = np.asarray(prompt, np.int64).reshape(1, -1)
    past = {f"past_key_values.{i}.{n}": np.zeros((1, heads, 0, head_dim), np.float32)
            for i in range(layers) for n in ("key", "value")}
    tokens, steps_out, seen = [], [], 0
    for _ in range(steps):
        out = run({"input_ids": ids, "attention_mask": np.ones((1, seen + ids.shape[1]), np.int64), **past})
        tokens.append(int(np.argmax(out["logits"][0, -1])))
        steps_out.append(out)
        seen += ids.shape[1]
        past = {name: out[name.replace("past_key_values", "present")] for name in past}
        ids = np.array([[tokens[-1]]], np.int64)
    return tokens, steps_out


def ort_runner(model: bytes):
    """ONNX Runtime on `model` as a function of feeds to outputs by name."""
    import onnxruntime as ort

    session = ort.InferenceSession(model)
    names = [o.name for o in session.get_outputs()]
    return lambda feeds: dict(zip(names, session.run(None, feeds)))


def assert_same_outputs(got: dict, expected: dict, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """Every output of `expected` (ONNX Runtime's, by name) at the same shape and close in `got` (Kiln's)."""
    for name, value in expected.items():
        assert got[name].shape == value.shape, name
        np.testing.assert_allclose(got[name], value, rtol=rtol, atol=atol, err_msg=name)


def check_image_sides(model: bytes, seed: int, sides, ranges: str = "1,2,6..12,6..12") -> None:
    """Compiles `model` (input x[N, C, H, W]) once with `ranges`, checks that its sides run on run-time lengths
    (masked, not bucketed), and compares every output with ONNX Runtime at each (height, width) of `sides`."""
    import core
    import onnxruntime as ort

    art = core.compile(model, input_shapes={"x": ranges}, benchmark=False)
    shapes = art.metadata["dynamic_shapes"]
    assert all(v["masked"] for v in shapes["variables"] if v["name"] in ("H", "W")), shapes["not_padded"]
    session = ort.InferenceSession(model)
    names = [o.name for o in session.get_outputs()]
    rng = np.random.default_rng(seed)
    dims = [int(d) for d in ranges.split(",")[:2]]
    with art.load() as module:
        for height, width in sides:
            x = rng.standard_normal((*dims, height, width)).astype(np.float32)
            got, want = module.run({"x": x}), dict(zip(names, session.run(None, {"x": x})))
            for name in names:
                assert got[name].shape == want[name].shape, (name, height, width)
                np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5, err_msg=name)
