"""ShuffleNet's channel split and shuffle (Slice, Concat, Reshape -> Transpose -> Reshape) compiled at -O3: the
same values as ONNX Runtime, and per-channel index math only (no division of the pixel's flat index)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import core
from core.frontend import import_onnx
from tests.backend_calls import optimize, build_executable
from core.target import get_target
from core.tir.expr import BinOp, IntImm
from core.tir.functor import stmt_exprs, walk_expr, walk_stmt


def _shuffle_block(channels: int, h: int, w: int) -> bytes:
    """x -> split in two halves; the second half through Relu; concat; shuffle the two groups."""
    half = channels // 2
    shapes = {"starts_a": [0], "ends_a": [half], "starts_b": [half], "ends_b": [channels], "axes": [1],
              "groups": [1, 2, half, h, w], "flat": [1, channels, h, w]}
    inits = [helper.make_tensor(k, TensorProto.INT64, [len(v)], v) for k, v in shapes.items()]
    nodes = [helper.make_node("Slice", ["x", "starts_a", "ends_a", "axes"], ["a"]),
             helper.make_node("Slice", ["x", "starts_b", "ends_b", "axes"], ["b"]),
             helper.make_node("Relu", ["b"], ["rb"]),
             helper.make_node("Concat", ["a", "rb"], ["cat"], axis=1),
             helper.make_node("Reshape", ["cat", "groups"], ["g"]),
             helper.make_node("Transpose", ["g"], ["t"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t", "flat"], ["y"])]
    x, y = (helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, channels, h, w]) for n in "xy")
    graph = helper.make_graph(nodes, "shuffle", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("channels, h, w", [(116, 28, 28), (48, 7, 9)])
def test_channel_shuffle_matches_onnxruntime(channels, h, w):
    model = _shuffle_block(channels, h, w)
    x = np.random.default_rng(0).standard_normal((1, channels, h, w)).astype(np.float32)
    expected = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = core.compile(model, "native", 3, benchmark=False).load().run({"x": x})["y"]
    np.testing.assert_array_equal(got, expected)  # data movement: bit-exact


def test_channel_shuffle_divides_channels_not_flat_pixel_indices():
    model = onnx.load_from_string(_shuffle_block(116, 28, 28))
    target = get_target("native")
    exe = build_executable(optimize(import_onnx(model), 3, target), target)
    divisors = {e.b.value for f in exe.funcs for s in walk_stmt(f.body) for top in stmt_exprs(s)
                for e in walk_expr(top) if isinstance(e, BinOp) and e.op in ("floordiv", "floormod")
                and isinstance(e.b, IntImm)}
    assert divisors and divisors <= {2}, divisors  # channel // 2 and channel % 2 only, not (c*784 + y*28 + x) // 1568
