"""The layout pass (alter_layout): conv regions in NCHW[x]c, transforms only at region boundaries,
packed weights; every rewritten graph keeps its meaning under the reference interpreter."""
from __future__ import annotations

import numpy as np
import pytest

from core.graph.interpret import evaluate
from core.graph.ir import TensorType
from core.graph.passes import fuse_ops, get_pass, run_passes
from core.graph.passes.alter_layout import alter_layout
from tests.helpers.graphs import CONV, assert_same_meaning, conv, image_builder, ops, rng
from core.packing.blocked import from_blocked, grouped_blocking, pack_weights, to_blocked


LANES = 8  # AVX2's float lanes, whatever the host


def _optimized(graph):
    return run_passes(graph, [("alter_layout", lambda g: alter_layout(g, lanes=LANES)),
                              ("eliminate_dead_code", get_pass("eliminate_dead_code"))])


def _chain(channels=(8, 16, 16, 8), shape=(1, 8, 6, 6)):
    b, x = image_builder(shape)
    for k, (c, m) in enumerate(zip(channels, channels[1:])):
        x = conv(b, x, c, m, seed=k)
        (x,) = b.add_node("Relu", [x])
    b.set_outputs([x])
    return b.build()


def test_a_chain_of_three_convs_has_exactly_two_transforms():
    graph = _chain()
    after = _optimized(graph)
    assert ops(after).count("LayoutTransform") == 2
    assert ops(after)[0] == "LayoutTransform" and ops(after)[-1] == "LayoutTransform"
    assert ops(after).count("Conv2dNCHWc") == 3 and "Conv" not in ops(after)
    assert all(after.type_of(n.outputs[0]).rank == 5 for n in after.nodes if n.op in ("Conv2dNCHWc", "Relu"))
    assert len(after.constants) == 6 and all(after.constants[c].ndim in (2, 6) for c in after.constants)
    assert_same_meaning(graph, after)


def test_region_ends_at_flatten_and_starts_again_after_it():
    b, x = image_builder((1, 8, 4, 4))
    y = conv(b, x, 8, 16, seed=0)
    (y,) = b.add_node("MaxPool", [y], kernel=(2, 2), strides=(2, 2), pads=(0, 0, 0, 0), dilations=(1, 1),
                      ceil_mode=0)
    (f,) = b.add_node("Reshape", [y], shape=(1, 16 * 2 * 2))
    (back,) = b.add_node("Reshape", [f], shape=(1, 16, 2, 2))
    z = conv(b, back, 16, 8, seed=1)
    b.set_outputs([z])
    graph = b.build()
    after = _optimized(graph)
    assert ops(after) == ["LayoutTransform", "Conv2dNCHWc", "MaxPoolNCHWc", "LayoutTransform", "Reshape", "Reshape",
                          "LayoutTransform", "Conv2dNCHWc", "LayoutTransform"]
    assert_same_meaning(graph, after)


def test_non_divisible_channel_counts_take_the_largest_dividing_block():
    graph = _chain(channels=(12, 20, 14), shape=(1, 12, 6, 6))
    after = _optimized(graph)
    convs = [n for n in after.nodes if n.op == "Conv2dNCHWc"]
    assert [after.type_of(n.inputs[1]).shape[4:] for n in convs] == [(6, 5), (5, 7)]
    assert ops(after).count("LayoutTransform") == 2
    assert_same_meaning(graph, after)


def test_a_region_with_short_reduction_convs_runs_blocked():
    # a 3-channel stem (reduces over 3 x 3 x 3 values) and a 16 -> 8 conv (16 x 3 x 3) in the same region
    graph = _chain(channels=(3, 16, 8), shape=(1, 3, 6, 6))
    after = _optimized(graph)
    assert ops(after) == ["LayoutTransform", "Conv2dNCHWc", "Relu", "Conv2dNCHWc", "Relu", "LayoutTransform"]
    assert_same_meaning(graph, after)


def test_narrow_output_blocks_stay_nchw():
    graph = _chain(channels=(16, 16, 3), shape=(1, 16, 6, 6))  # 3 output channels: 3 lanes out of 8
    after = _optimized(graph)
    assert ops(after) == ["LayoutTransform", "Conv2dNCHWc", "Relu", "LayoutTransform", "Conv", "Relu"]
    assert_same_meaning(graph, after)


def test_a_branch_with_a_residual_add_and_a_plain_reader():
    # x -> conv -> relu -> conv -> add(relu) -> relu -> out;  relu is also an output itself (NCHW)
    b, x = image_builder((1, 8, 5, 5))
    y = conv(b, x, 8, 8, seed=0)
    (r,) = b.add_node("Relu", [y])
    z = conv(b, r, 8, 8, seed=1)
    (s,) = b.add_node("Add", [z, r])
    (o,) = b.add_node("Relu", [s])
    b.set_outputs([o, r])
    graph = b.build()
    after = _optimized(graph)
    assert ops(after).count("LayoutTransform") == 3  # in; and out for each of the two outputs
    assert [n.op for n in after.nodes if n.outputs[0] in graph.outputs] == ["LayoutTransform", "LayoutTransform"]
    assert_same_meaning(graph, after)
    fused = fuse_ops(after)
    assert ("Conv2dNCHWc", "Add", "Relu") in [n.attr("ops") for n in fused.nodes if n.op == "Fused"]


def test_per_channel_constants_are_blocked_and_concat_along_channels_stays_blocked():
    b, x = image_builder((1, 8, 4, 4))
    left, right = conv(b, x, 8, 8, seed=0), conv(b, x, 8, 16, seed=1)
    (cat,) = b.add_node("Concat", [left, right], axis=1)
    scale = rng(3).standard_normal((24, 1, 1)).astype(np.float32)
    (y,) = b.add_node("Mul", [cat, b.add_constant(scale, "scale")])
    (y,) = b.add_node("Add", [y, b.add_constant(np.float32(0.5).reshape(()), "half")])
    (y,) = b.add_node("GlobalAveragePool", [y])
    b.set_outputs([y])
    graph = b.build()
    after = _optimized(graph)
    assert ops(after) == ["LayoutTransform", "Conv2dNCHWc", "Conv2dNCHWc", "Concat", "Mul", "Add",
                          "GlobalAveragePoolNCHWc", "LayoutTransform"]
    mul = next(n for n in after.nodes if n.op == "Mul")
    assert after.type_of(mul.inputs[1]).shape == (1, 3, 1, 1, 8)
    assert_same_meaning(graph, after)


def _pointwise(b, x, channels, out, seed):
    w = b.add_constant(rng(seed).standard_normal((out, channels, 1, 1)).astype(np.float32), "pw")
    bias = b.add_constant(rng(seed + 1).standard_normal(out).astype(np.float32), "pwb")
    return b.add_node("Conv", [x, w, bias], **dict(CONV, pads=(0, 0, 0, 0)))[0]


def _inverted_residual(expand_from=16):
    """mobilenet_v2's block: expand 1x1 (short reduction) -> Relu -> depthwise 3x3 s2 -> project 1x1."""
    b, x = image_builder((1, expand_from, 9, 9))
    y = _pointwise(b, x, expand_from, 32, seed=0)
    (y,) = b.add_node("Relu", [y])
    w = b.add_constant(rng(1).standard_normal((32, 1, 3, 3)).astype(np.float32), "dw")
    (y,) = b.add_node("Conv", [y, w], **dict(CONV, group=32, strides=(2, 2)))
    (y,) = b.add_node("Relu", [y])
    y = _pointwise(b, y, 32, 16, seed=2)
    b.set_outputs([y])
    return b.build()


def test_a_region_with_depthwise_and_dense_convs_runs_blocked_short_reductions_included():
    graph = _inverted_residual()
    after = _optimized(graph)
    assert ops(after) == ["LayoutTransform", "Conv2dNCHWc", "Relu", "Conv2dNCHWc", "Relu", "Conv2dNCHWc",
                          "LayoutTransform"]
    assert [n.attr("depthwise") for n in after.nodes if n.op == "Conv2dNCHWc"] == [False, True, False]
    assert_same_meaning(graph, after)


def _grouped_chain(channels, group, in_group):
    """dense 1x1 -> Relu -> grouped 3x3 (`in_group` input channels per group) -> dense 1x1."""
    b, x = image_builder((1, channels, 6, 7))
    y = _pointwise(b, x, channels, channels, seed=0)
    (y,) = b.add_node("Relu", [y])
    g = b.add_constant(rng(1).standard_normal((channels, in_group, 3, 3)).astype(np.float32), "grouped")
    (y,) = b.add_node("Conv", [y, g], **dict(CONV, group=group))
    y = _pointwise(b, y, channels, channels, seed=2)
    b.set_outputs([y])
    return b.build()


@pytest.mark.parametrize("group, in_group, blocked_groups", [(8, 8, 8), (16, 4, 8)], ids=["blocks_in_groups",
                                                                                           "block_diagonal"])
def test_grouped_convs_run_blocked_between_dense_ones(group, in_group, blocked_groups):
    graph = _grouped_chain(64, group, in_group)  # the grouped conv reduces over 8 x 3 x 3 (block-diagonal: half 0s)
    after = _optimized(graph)
    assert ops(after) == ["LayoutTransform", "Conv2dNCHWc", "Relu", "Conv2dNCHWc", "Conv2dNCHWc", "LayoutTransform"]
    grouped = [n for n in after.nodes if n.op == "Conv2dNCHWc"][1]
    assert grouped.attr("group") == blocked_groups and not grouped.attr("depthwise")
    assert "Conv2dWinogradNCHWc" not in ops(_optimized(_grouped_chain(128, 2, 64)))  # grouped: direct
    assert_same_meaning(graph, after, rtol=1e-4, atol=1e-3)  # outputs in the hundreds, summed in another order


def test_grouped_convs_whose_groups_fit_no_block_stay_nchw():
    b, x = image_builder((1, 16, 6, 7))
    g = b.add_constant(rng(1).standard_normal((32, 2, 3, 3)).astype(np.float32), "grouped")
    (y,) = b.add_node("Conv", [x, g], **dict(CONV, group=8))  # 2 in, 4 out per group: no block holds whole groups
    b.set_outputs([y])
    graph = b.build()
    assert grouped_blocking(16, 32, 8, LANES, LANES // 2) is None
    assert ops(_optimized(graph)) == ["Conv"]


def test_squeeze_excitation_scales_per_channel_stay_blocked():
    b, x = image_builder((1, 64, 5, 6))
    y = _pointwise(b, x, 64, 64, seed=0)
    (pooled,) = b.add_node("GlobalAveragePool", [y])
    (gate,) = b.add_node("Sigmoid", [_pointwise(b, pooled, 64, 64, seed=2)])
    (y,) = b.add_node("Mul", [y, gate])  # (1, 64, 5, 6) x (1, 64, 1, 1)
    b.set_outputs([_pointwise(b, y, 64, 64, seed=4)])
    graph = b.build()
    after = _optimized(graph)
    assert ops(after) == ["LayoutTransform", "Conv2dNCHWc", "GlobalAveragePoolNCHWc", "Conv2dNCHWc", "Sigmoid", "Mul",
                          "Conv2dNCHWc", "LayoutTransform"]
    assert_same_meaning(graph, after, rtol=1e-4, atol=1e-3)


def test_a_lone_depthwise_conv_stays_nchw():
    b, x = image_builder((1, 16, 6, 6))
    w = b.add_constant(rng(0).standard_normal((16, 1, 3, 3)).astype(np.float32), "dw")
    (y,) = b.add_node("Conv", [x, w], **dict(CONV, group=16))
    b.set_outputs([y])
    graph = b.build()
    assert ops(_optimized(graph)) == ["Conv"]


def test_blocked_depthwise_conv_means_the_same():
    from core.graph.ops import get_op

    x = rng(0).standard_normal((1, 16, 7, 7)).astype(np.float32)
    w = rng(1).standard_normal((16, 1, 3, 3)).astype(np.float32)
    bias = rng(2).standard_normal(16).astype(np.float32)
    attrs = {"strides": (2, 2), "pads": (1, 1, 1, 1), "dilations": (1, 1)}
    (expected,) = get_op("Conv").fold([x, w, bias], dict(attrs, group=16))
    (got,) = get_op("Conv2dNCHWc").fold([to_blocked(x, 8), pack_weights(w, 8, 8, True), bias.reshape(2, 8)],
                                        dict(attrs, depthwise=True))
    np.testing.assert_allclose(from_blocked(got), expected, rtol=1e-5, atol=1e-5)


def test_a_graph_without_convs_is_untouched_and_o3_runs_the_pass():
    from core.graph.passes import LEVELS

    b, x = image_builder()
    (y,) = b.add_node("Relu", [x])
    b.set_outputs([y])
    graph = b.build()
    assert alter_layout(graph, lanes=LANES).nodes == graph.nodes
    assert "alter_layout" in LEVELS[3] and all("alter_layout" not in LEVELS[k] for k in (0, 1, 2))
    assert LEVELS[3].index("alter_layout") < LEVELS[3].index("fuse_ops")


def test_layout_transform_types():
    from core.errors import ShapeError
    from core.graph.ops import get_op

    infer = get_op("LayoutTransform").infer
    assert infer([TensorType((1, 16, 3, 3), "float32")], {"src_block": 0, "dst_block": 8})[0].shape == (1, 2, 3, 3, 8)
    assert infer([TensorType((1, 2, 3, 3, 8), "float32")], {"src_block": 8, "dst_block": 4})[0].shape == (1, 4, 3, 3, 4)
    with pytest.raises(ShapeError):
        infer([TensorType((1, 12, 3, 3), "float32")], {"src_block": 0, "dst_block": 8})
    x = rng(4).standard_normal((1, 16, 2, 3)).astype(np.float32)
    graph = _transform_graph()
    np.testing.assert_array_equal(evaluate(graph, {"x": x})[graph.outputs[0]], x)


def _transform_graph():
    b, x = image_builder((1, 16, 2, 3))
    (a,) = b.add_node("LayoutTransform", [x], src_block=0, dst_block=8)
    (c,) = b.add_node("LayoutTransform", [a], src_block=8, dst_block=4)
    (y,) = b.add_node("LayoutTransform", [c], src_block=4, dst_block=0)
    b.set_outputs([y])
    return b.build()
