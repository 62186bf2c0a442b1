"""Winograd F(2x2, 3x3) and F(4x4, 3x3) at the graph level: the layout pass picks Conv2dWinogradNCHWc for exactly
the convs it fits, and the rewritten graph keeps its meaning."""
from __future__ import annotations

import numpy as np

from core.graph.passes import get_pass, run_passes
from core.graph.passes.alter_layout import alter_layout
from core.graph.interpret import evaluate
from tests.helpers.graphs import CONV, conv, feeds_for, image_builder, rng


def _optimized(graph, max_winograd_tile: int = 4):
    return run_passes(graph, [("alter_layout", lambda g: alter_layout(g, lanes=8, max_winograd_tile=max_winograd_tile)),
                              ("eliminate_dead_code", get_pass("eliminate_dead_code"))])


def test_the_winograd_tile_cap_takes_f2x2_or_direct_where_f4x4_would_run():
    """A quick compile's cap (Backend.pass_options(quick=True)): F(2x2) at most, or 0: every conv direct."""
    b, x = image_builder((1, 32, 28, 28))
    b.set_outputs([conv(b, x, 32, 32, seed=0)])  # uncapped: Winograd F(4x4), a large map
    graph = b.build()
    for cap, op, transformed in ((4, "Conv2dWinogradNCHWc", 36), (2, "Conv2dWinogradNCHWc", 16), (0, "Conv2dNCHWc", 0)):
        after = _optimized(graph, cap)
        (node,) = [n for n in after.nodes if n.op.startswith("Conv")]
        assert node.op == op and (not transformed or after.constants[node.inputs[1]].shape[0] == transformed)
        feeds = feeds_for(graph)
        expected, actual = evaluate(graph, feeds)[graph.outputs[0]], evaluate(after, feeds)[graph.outputs[0]]
        np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5 * float(np.abs(expected).max()))


def test_layout_pass_uses_winograd_for_wide_3x3_stride1_convs_only():
    b, x = image_builder((1, 32, 28, 28))
    x = conv(b, x, 32, 32, seed=0)  # Winograd F(4x4): a large map
    (x,) = b.add_node("Relu", [x])
    w = b.add_constant(rng(3).standard_normal((32, 32, 3, 3)).astype(np.float32), "w")
    (x,) = b.add_node("Conv", [x, w], **dict(CONV, strides=(2, 2)))  # strided: direct
    x = conv(b, x, 32, 32, seed=4)  # Winograd F(2x2): 14x14
    x = conv(b, x, 32, 16, seed=1)  # 16 output channels: direct
    x = conv(b, x, 16, 32, seed=2, bias=False)  # 16 input channels: direct
    b.set_outputs([x])
    graph = b.build()
    after = _optimized(graph)
    convs = [n for n in after.nodes if n.op.startswith("Conv")]
    assert [n.op for n in convs] == ["Conv2dWinogradNCHWc", "Conv2dNCHWc", "Conv2dWinogradNCHWc"] + ["Conv2dNCHWc"] * 2
    assert after.constants[convs[0].inputs[1]].shape == (36, 4, 4, 8, 8)
    assert after.constants[convs[2].inputs[1]].shape == (16, 4, 4, 8, 8)
    # The interpreter folds the Winograd convs by the inverse weight transform; the outputs reach ~1e3
    # (four unnormalized convs), so the tolerance follows their scale.
    feeds = feeds_for(graph)
    expected, actual = evaluate(graph, feeds)[graph.outputs[0]], evaluate(after, feeds)[graph.outputs[0]]
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5 * float(np.abs(expected).max()))
