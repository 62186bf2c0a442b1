"""Conv2dWinogradNCHWc against ONNX Runtime's Conv on the same inputs: padded and unpadded, odd
output sizes, asymmetric pads, batches, no bias, tuned GEMM tiles; and a whole model whose 3x3
convs (with a fused residual Add and ReLU) take the Winograd path."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import core
from core.kernels.schedules.conv2d_winograd import schedule_conv2d_winograd
from tests.helpers.kernel_runs import OpKernel, build_kernels, onnx_reference
from core.packing.blocked import from_blocked, to_blocked
from core.packing.winograd import winograd_weights
from core.driver.validate import compare, index_bounds, onnxruntime_session, random_inputs

rng = np.random.default_rng(5)

CASES = [  # id, input NCHW, out channels, pads (top, left, bottom, right), bias, block, output tile, GEMM knobs
    ("pad1_even", (1, 32, 8, 10), 32, (1, 1, 1, 1), True, 8, 2, {}),
    ("pad1_odd_7x7", (1, 16, 7, 7), 24, (1, 1, 1, 1), True, 8, 2, {}),
    ("valid_odd", (1, 8, 9, 6), 16, (0, 0, 0, 0), True, 8, 2, {}),
    ("asymmetric_pads", (1, 16, 6, 5), 16, (0, 2, 1, 0), True, 8, 2, {}),
    ("batch2_no_bias", (2, 16, 6, 6), 8, (1, 1, 1, 1), False, 8, 2, {}),
    ("block4", (1, 12, 6, 6), 12, (1, 1, 1, 1), True, 4, 2, {}),
    ("tuned_tiles", (1, 32, 8, 8), 32, (1, 1, 1, 1), True, 8, 2, {"tile_t": 8, "oc_t": 2, "unroll_inner": 1}),
    ("f4x4_pad1", (1, 32, 12, 16), 16, (1, 1, 1, 1), True, 8, 4, {}),
    ("f4x4_ragged_tiles", (2, 16, 13, 10), 24, (1, 1, 1, 1), True, 8, 4, {}),  # 13x10: partial tiles, padded count
    ("f4x4_tuned", (1, 16, 8, 8), 16, (1, 1, 1, 1), False, 8, 4, {"tile_t": 4, "oc_t": 1}),
]


@pytest.fixture(scope="module")
def runs():
    kernels, expected = [], []
    for cid, shape, m, pads, with_bias, block, tile, knobs in CASES:
        x = rng.standard_normal(shape).astype(np.float32)
        w = rng.standard_normal((m, shape[1], 3, 3)).astype(np.float32)
        bias = rng.standard_normal(m).astype(np.float32)
        inputs = [to_blocked(x, block), winograd_weights(w, block, block, tile)] + ([bias.reshape(-1, block)] if with_bias else [])
        schedule = (lambda sch, outs, target, kn=knobs: schedule_conv2d_winograd(sch, outs, target, **kn)) if knobs else None
        kernels.append(OpKernel(f"winograd_{cid}", "Conv2dWinogradNCHWc", inputs, {"pads": pads}, schedule_fn=schedule))
        ort_pads = [pads[0], pads[1], pads[2], pads[3]]
        (y,) = onnx_reference("Conv", [x, w] + ([bias] if with_bias else []), {"pads": ort_pads})
        expected.append((y, float(np.sqrt(w[0].size))))
    return {c[0]: (r.run()[0], *e) for c, r, e in zip(CASES, build_kernels(kernels), expected)}


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_winograd_conv_matches_onnxruntime(runs, cid):
    actual, expected, scale = runs[cid]
    np.testing.assert_allclose(from_blocked(actual), expected, rtol=1e-4, atol=2e-5 * scale)


def _residual_block(channels: int = 32, size: int = 8) -> bytes:
    """conv3x3 -> ReLU -> conv3x3 (+ the block's input) -> ReLU, and a stride-2 conv (not Winograd)."""
    r = np.random.default_rng(1)

    def const(name, *shape):
        return numpy_helper.from_array((r.standard_normal(shape) * 0.2).astype(np.float32), name)

    inits = [const("w1", channels, channels, 3, 3), const("b1", channels), const("w2", channels, channels, 3, 3),
             const("b2", channels), const("w3", channels, channels, 3, 3)]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "x"], ["s"]),
        helper.make_node("Relu", ["s"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2]),
    ]
    graph = helper.make_graph(nodes, "resblock",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, size // 2, size // 2]),
                               helper.make_tensor_value_info("r2", TensorProto.FLOAT, [1, channels, size, size])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_a_residual_block_compiles_to_winograd_kernels_and_matches_onnxruntime():
    model = _residual_block()
    artifact = core.compile(model, target="native", benchmark=False)
    ops = [op for k in artifact.report["kernels"] for op in k["ops"]]
    assert ops.count("Conv2dWinogradNCHWc") == 2 and ops.count("Conv2dNCHWc") == 1  # the stride-2 conv stays direct
    graph = core.frontend.import_onnx(model)
    feeds = random_inputs(graph, 3, index_bounds(graph))
    session = onnxruntime_session(model, 2)
    expected = dict(zip(graph.outputs, session.run(list(graph.outputs), feeds)))
    module = artifact.load()
    try:
        actual = module.run(feeds)
    finally:
        module.close()
    result = compare(actual, expected)
    assert result.ok, result
