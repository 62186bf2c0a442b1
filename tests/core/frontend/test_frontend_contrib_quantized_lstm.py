"""com.microsoft DynamicQuantizeLSTM (onnxruntime.quantization.quantize_dynamic of an LSTM) compiled on the integer
path and compared with an exact evaluation (numpy: DynamicQuantizeLinear of each product's float operand, int64
products): ONNX Runtime is no oracle on AVX2-only hosts, where its u8 x s8 kernel saturates int16 pair sums (the
last test shows it matching a saturating emulation there)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

import core

def lstm_model(seq: int, batch: int, size: int, hidden: int, direction: str, states: bool,
               spread=lambda rng, shape: rng.standard_normal(shape) * 0.4) -> onnx.ModelProto:
    rng = np.random.default_rng(seq * 1000 + size)  # each case its own weights, whatever runs before it
    directions = 2 if direction == "bidirectional" else 1
    weights = {"W": spread(rng, (directions, 4 * hidden, size)), "R": spread(rng, (directions, 4 * hidden, hidden)),
               "B": rng.standard_normal((directions, 8 * hidden)) * 0.2}
    inputs = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [seq, batch, size])]
    names = ["x", "W", "R", "B", ""]
    if states:
        for name in ("h0", "c0"):
            inputs.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [directions, batch, hidden]))
            names.append(name)
    node = helper.make_node("LSTM", names, ["y", "y_h", "y_c"], hidden_size=hidden, direction=direction)
    outputs = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in ("y", "y_h", "y_c")]
    graph = helper.make_graph([node], "lstm", inputs, outputs,
                              [numpy_helper.from_array(v.astype(np.float32), n) for n, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def dynamically_quantized(model: onnx.ModelProto, folder) -> onnx.ModelProto:
    (folder / "f.onnx").write_bytes(model.SerializeToString())
    quantize_dynamic(str(folder / "f.onnx"), str(folder / "q.onnx"), weight_type=QuantType.QInt8)
    quantized = onnx.load(folder / "q.onnx")
    assert [n.op_type for n in quantized.graph.node] == ["DynamicQuantizeLSTM"]
    return quantized


def dynamic_quantize(x: np.ndarray) -> tuple[np.ndarray, np.float32, int]:
    """ONNX DynamicQuantizeLinear (the range widened to include 0), as int64."""
    low, high = min(float(x.min()), 0.0), max(float(x.max()), 0.0)
    scale = np.float32((high - low) / 255) if high != low else np.float32(1)
    zero = int(np.clip(np.round(np.float32(0) - np.float32(low) / scale), 0, 255))
    return np.clip(np.round(x / scale) + zero, 0, 255).astype(np.int64), scale, zero


def exact_matmul(q: np.ndarray, zero: int, weights: np.ndarray) -> np.ndarray:
    return (q - zero) @ weights


def pair_saturating_matmul(q: np.ndarray, zero: int, weights: np.ndarray) -> np.ndarray:
    """What an AVX2 vpmaddubsw kernel (MLAS's u8 x s8) computes: the raw u8 x s8 products summed in pairs (k, k+1)
    into int16, saturating, then the data zero point times each column's sum subtracted."""
    if q.shape[1] % 2:
        q, weights = np.pad(q, ((0, 0), (0, 1))), np.pad(weights, ((0, 1), (0, 0)))
    pairs = q[:, 0::2, None] * weights[None, 0::2] + q[:, 1::2, None] * weights[None, 1::2]
    return np.clip(pairs, -32768, 32767).sum(axis=1) - zero * weights.sum(axis=0)


def product(x: np.ndarray, weights: np.ndarray, scale: np.ndarray, zero: np.ndarray, matmul) -> np.ndarray:
    q, x_scale, x_zero = dynamic_quantize(x)
    integer = matmul(q, x_zero, weights.astype(np.int64) - zero.astype(np.int64))
    return integer.astype(np.float32) * (x_scale * scale)


def reference(model: onnx.ModelProto, feeds: dict, matmul=exact_matmul) -> list[np.ndarray]:
    """Y [S, D, B, H], Y_h, Y_c of DynamicQuantizeLSTM; `matmul(q, q's zero point, weights)` the integer product."""
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    node = model.graph.node[0]
    names = dict(zip(["x", "W", "R", "B", "lens", "h0", "c0", "P", "ws", "wz", "rs", "rz"], node.input))
    x = feeds["x"]
    seq, batch, size = x.shape
    directions, hidden = init[names["R"]].shape[0], init[names["R"]].shape[1]
    direction = next((a.s for a in node.attribute if a.name == "direction"), b"forward")
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    ys, hs, cs = [], [], []
    for d in range(directions):
        w, r, bias = init[names["W"]][d], init[names["R"]][d], init[names["B"]][d]
        ws, wz, rs, rz = (init[names[k]][d] for k in ("ws", "wz", "rs", "rz"))
        projected = product(x.reshape(seq * batch, size), w, ws, wz, matmul).reshape(seq, batch, 4 * hidden)
        projected = projected + (bias[:4 * hidden] + bias[4 * hidden:])
        h = feeds["h0"][d] if "h0" in feeds else np.zeros((batch, hidden), np.float32)
        c = feeds["c0"][d] if "c0" in feeds else np.zeros((batch, hidden), np.float32)
        out = [None] * seq
        for t in range(seq - 1, -1, -1) if d == 1 or direction == b"reverse" else range(seq):
            gates = projected[t] + product(h, r, rs, rz, matmul)
            i, o, f, cell = np.split(gates, 4, axis=-1)
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(cell)
            h = (sigmoid(o) * np.tanh(c)).astype(np.float32)
            out[t] = h
        ys.append(np.stack(out))
        hs.append(h)
        cs.append(c)
    return [np.stack(ys, 1), np.stack(hs), np.stack(cs)]


CASES = {
    "bidirectional": dict(seq=5, batch=1, size=12, hidden=16, direction="bidirectional", states=False),
    "forward_batch_states": dict(seq=4, batch=3, size=20, hidden=8, direction="forward", states=True),
    "reverse": dict(seq=3, batch=2, size=7, hidden=12, direction="reverse", states=False),
}


def feeds_for(model: onnx.ModelProto, case: dict) -> dict:
    rng = np.random.default_rng(case["hidden"])
    feeds = {"x": rng.standard_normal((case["seq"], case["batch"], case["size"])).astype(np.float32)}
    directions = 2 if case["direction"] == "bidirectional" else 1
    if case["states"]:
        for name in ("h0", "c0"):
            feeds[name] = (rng.standard_normal((directions, case["batch"], case["hidden"])) * 0.5).astype(np.float32)
    return feeds


@pytest.mark.parametrize("name", sorted(CASES))
def test_dynamic_quantize_lstm_runs_integer_products_exactly(name, tmp_path):
    case = CASES[name]
    model = dynamically_quantized(lstm_model(**case), tmp_path)
    feeds = feeds_for(model, case)
    artifact = core.compile(model.SerializeToString(), target="native", validate="off", benchmark=False)
    ops = {op for group in artifact.report["graph"]["fusion_groups"] for op in group["ops"]}
    assert ops & {"MatMulIntegerPacked", "MatMulInteger"} and "LSTMSequence" not in ops, ops
    with artifact.load() as module:
        ours = module.run(feeds)
    for got, want in zip(ours.values(), reference(model, feeds)):
        # float gate math in another order: a few ulps, far below one activation quantization step (~1e-2)
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-5)


def test_onnxruntime_saturates_where_kiln_is_exact(tmp_path):
    """ONNX Runtime's result is the exact one, or (AVX2 without VNNI) the one whose int16 pair sums saturate;
    Kiln's is the exact one."""
    case = CASES["bidirectional"]
    # uniform weights and non-negative inputs: many products near 255 x +-127, so int16 pair sums overflow
    model = dynamically_quantized(lstm_model(**case, spread=lambda rng, shape: rng.uniform(-1, 1, shape)), tmp_path)
    feeds = {"x": np.random.default_rng(5).uniform(0, 1, (case["seq"], case["batch"], case["size"])).astype(np.float32)}
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # one quantization of each step's whole batch, as Kiln's
    theirs = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(
        None, feeds)[0]
    exact, saturated = (reference(model, feeds, matmul)[0] for matmul in (exact_matmul, pair_saturating_matmul))
    assert np.abs(exact - saturated).max() > 1e-4  # these inputs do saturate int16 pair sums
    apart = (np.abs(theirs - exact).max(), np.abs(theirs - saturated).max())
    assert min(apart) < 2e-5, apart
    artifact = core.compile(model.SerializeToString(), target="native", validate="off", benchmark=False)
    with artifact.load() as module:
        np.testing.assert_allclose(module.run(feeds)["y"], exact, rtol=0, atol=2e-5)


def test_a_default_compile_validates_against_the_exact_reference(tmp_path):
    """The compile's own validation takes the exact evaluation (core/driver/reference_ops.py), not ONNX Runtime's
    kernel: it passes on every host, and the reference agrees with this file's numpy evaluation."""
    from core.driver.reference import EXACT_REFERENCE, reference_outputs

    case = CASES["bidirectional"]
    model = dynamically_quantized(lstm_model(**case, spread=lambda rng, shape: rng.uniform(-1, 1, shape)), tmp_path)
    feeds = {"x": np.random.default_rng(5).uniform(0, 1, (case["seq"], case["batch"], case["size"])).astype(np.float32)}
    np.testing.assert_allclose(reference_outputs(model, feeds)["y"], reference(model, feeds)[0], rtol=0, atol=1e-6)
    artifact = core.compile(model.SerializeToString(), target="native", benchmark=False,
                            validation_inputs=[_npz(tmp_path, feeds)])
    assert artifact.report["validation"]["passed"] and artifact.report["validation"]["reference"] == EXACT_REFERENCE


def _npz(folder, feeds) -> str:
    path = folder / "inputs.npz"
    np.savez(path, **feeds)
    return str(path)
