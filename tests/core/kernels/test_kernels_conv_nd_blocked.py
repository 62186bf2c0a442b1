"""3-D convs in NCDHW[x]c (alter_layout_3d + ConvNDNCHWc) compiled vs ONNX Runtime; the blocks and vector width
follow an explicit target (x86-64-v3: 8 lanes, x86-64-v4: 16), whatever the host."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from core.codegen.build import optimized_llvm_ir
from core.frontend import import_onnx
from tests.backend_calls import optimize, get_schedule
from core.kernels import get_compute
from core.target import get_target
from core.te import tensor as te
from core.te.lower import lower
from core.te.schedule import create_schedule

from .conv_nd_models import ModelBuilder
from .spatial_cases import assert_kiln_matches_ort, assert_model_matches, one_node_model

rng = np.random.default_rng(37)

# Channel counts of at least 8, so that every case runs blocked on AVX2 and AVX-512 hosts alike.
CASES = [
    ((1, 16, 4, 6, 9), (16, 16, 3, 3, 3), {"pads": [1] * 6}),
    ((1, 8, 7, 9, 10), (16, 8, 3, 3, 3), {"strides": [2, 2, 2], "pads": [1, 1, 1, 1, 1, 1]}),
    ((1, 16, 6, 8, 9), (16, 16, 2, 3, 2), {"dilations": [2, 1, 3], "pads": [0, 2, 1, 1, 0, 2]}),
    ((1, 32, 3, 6, 7), (32, 16, 3, 1, 3), {"group": 2, "strides": [1, 2, 1], "pads": [1, 0, 1, 1, 0, 1]}),
    ((1, 16, 4, 9, 9), (16, 1, 3, 3, 3), {"group": 16, "pads": [1] * 6}),  # depthwise
    ((2, 16, 4, 7, 13), (32, 16, 1, 1, 1), {}),  # pointwise, odd width (widened columns cropped)
    ((1, 3, 4, 14, 14), (16, 3, 3, 7, 7), {"strides": [1, 2, 2], "pads": [1, 3, 3, 1, 3, 3]}),  # r3d stem
]


def blocked_ops(model, target=None) -> list[str]:
    graph = optimize(import_onnx(model), 3, target)
    return [n.op for g in graph.nodes for n in (g.attr("body").nodes if g.op == "Fused" else [g])]


@pytest.mark.parametrize("x_shape,w_shape,attrs", CASES)
def test_blocked_conv3d_matches_ort(x_shape, w_shape, attrs):
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = (rng.standard_normal(w_shape) * 0.3).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    assert_kiln_matches_ort(node, {"x": x}, {"w": w, "b": b}, opset=17, atol=1e-4)
    ops = blocked_ops(one_node_model(node, {"x": x}, {"w": w, "b": b}, 17))
    assert "ConvNDNCHWc" in ops and "ConvND" not in ops


def conv_chain():
    """conv-ReLU, conv + residual Add, ReLU: one blocked region."""
    b = ModelBuilder(5)
    x = b.node("Relu", [b.conv("x", 16, 16, (3, 3, 3), pads=[1] * 6)])
    y = b.conv(x, 16, 16, (3, 3, 3), pads=[1] * 6)
    return b.model({"x": (1, 16, 4, 8, 8)}, b.node("Relu", [b.node("Add", [y, x])]))


def test_consecutive_blocked_convs_share_the_layout():
    model = conv_chain()
    assert_model_matches(model, {"x": rng.standard_normal((1, 16, 4, 8, 8)).astype(np.float32)}, atol=1e-4)
    ops = blocked_ops(model)
    assert ops.count("ConvNDNCHWc") == 2 and ops.count("LayoutTransform") == 2  # at the region's ends only


@pytest.mark.parametrize("target_name,lanes", [("x86-64-v3", 8), ("x86-64-v4", 16)])
def test_blocks_and_vectors_follow_the_target(target_name, lanes):
    target = get_target(target_name)
    graph = optimize(import_onnx(conv_chain()), 3, target)
    nodes = [n for g in graph.nodes for n in (g.attr("body").nodes if g.op == "Fused" else [g])]
    convs = [n for n in nodes if n.op == "ConvNDNCHWc"]
    assert convs and all(graph.type_of(n.outputs[0]).shape[-1] == lanes for n in convs)
    x = te.placeholder((1, 16 // lanes, 4, 8, 8, lanes), "float32", "x")
    w = te.placeholder((16 // lanes, 16 // lanes, 3, 3, 3, lanes, lanes), "float32", "w")
    attrs = {"pads": [1] * 6, "group": 1, "depthwise": False}
    outs = get_compute("ConvNDNCHWc")([x, w], attrs, [])
    sch = create_schedule(outs)
    get_schedule("ConvNDNCHWc", target)(sch, outs, target)
    text = optimized_llvm_ir([lower(sch, [x, w] + outs, "k_conv_nd_nchwc", num_outputs=1)], target)
    assert f"fmul contract <{lanes} x float>" in text  # the channel block is the vector: FMAs on whole vectors


POOLS = [
    ("MaxPool", {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]}),
    ("MaxPool", {"kernel_shape": [3, 3, 3], "strides": [2, 2, 2], "pads": [1] * 6, "dilations": [1, 2, 1]}),
    ("AveragePool", {"kernel_shape": [3, 3, 3], "strides": [1, 2, 2], "pads": [1] * 6}),
    ("AveragePool", {"kernel_shape": [3, 2, 3], "strides": [2, 2, 1], "pads": [1, 0, 1, 0, 1, 1],
                     "count_include_pad": 1, "ceil_mode": 1}),
]


@pytest.mark.parametrize("op,attrs", POOLS)
def test_pools_between_blocked_convs_stay_blocked(op, attrs):
    b = ModelBuilder(7)
    x = b.node(op, [b.node("Relu", [b.conv("x", 8, 16, (3, 3, 3), pads=[1] * 6)])], **attrs)
    model = b.model({"x": (1, 8, 6, 9, 10)}, b.conv(x, 16, 16, (1, 1, 1)))
    assert_model_matches(model, {"x": rng.standard_normal((1, 8, 6, 9, 10)).astype(np.float32)}, atol=1e-4)
    ops = blocked_ops(model)
    assert "PoolNDNCHWc" in ops and "PoolND" not in ops and ops.count("LayoutTransform") == 2


def test_blocked_ops_refuse_mismatched_blocks_and_fold_like_the_plain_ops():
    from core.errors import ShapeError
    from core.graph.ir import TensorType
    from core.graph.op_defs.conv_nd import conv_nd_fold
    from core.graph.ops import get_op
    from core.packing.blocked import from_blocked, pack_weights, relayout, to_blocked

    conv = get_op("ConvNDNCHWc")
    with pytest.raises(ShapeError, match="not blocked like the weights"):
        conv.infer([TensorType((1, 2, 4, 4, 4, 8), "float32"), TensorType((2, 4, 3, 3, 3, 4, 8), "float32")], {})
    x = rng.standard_normal((1, 16, 3, 4, 5)).astype(np.float32)
    w = rng.standard_normal((8, 16, 1, 2, 3)).astype(np.float32)
    attrs = {"pads": [0, 1, 1, 0, 0, 1], "strides": [1, 1, 2]}
    (got,) = conv.fold([to_blocked(x, 8), pack_weights(w, 8, 4, False)], dict(attrs, group=1))
    np.testing.assert_allclose(from_blocked(got), conv_nd_fold([x, w], attrs)[0], rtol=1e-5, atol=1e-5)
    transform = get_op("LayoutTransform")
    assert transform.infer([TensorType((1, 16, 3, 4, 5), "float32")], {"src_block": 0, "dst_block": 8})[0].shape \
        == (1, 2, 3, 4, 5, 8)
    np.testing.assert_array_equal(relayout(relayout(x, 0, 8), 8, 4), to_blocked(x, 4))
