"""Indexing, selection and reduction-like ops compiled end to end (KilnBackend) against ONNX Runtime:
ArgMax/ArgMin, Trilu, CumSum/CumProd, TopK, Scatter*, GatherND, OneHot, EyeLike, ReverseSequence, Einsum."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from core.onnx_backend.backend import KilnBackend

F32, I64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64


def _model(node: onnx.NodeProto, inputs: dict, outputs: dict, opset: int, shapes=None) -> onnx.ModelProto:
    """inputs: name -> array (the feeds); outputs: name -> ONNX elem type; shapes: the output shapes."""
    graph = helper.make_graph(
        [node], "t",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs.items()],
        [helper.make_tensor_value_info(n, t, None if shapes is None else s) for (n, t), s in
         zip(outputs.items(), shapes or [None] * len(outputs))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def check(node: onnx.NodeProto, inputs: dict, outputs: dict, opset: int = 18) -> list[np.ndarray]:
    """Runs the node with ONNX Runtime, then compiles it with the output shapes ORT found, and compares."""
    theirs = ort.InferenceSession(_model(node, inputs, outputs, opset).SerializeToString(),
                                  providers=["CPUExecutionProvider"]).run(None, inputs)
    model = _model(node, inputs, outputs, opset, [t.shape for t in theirs])
    ours = KilnBackend.run_model(model, list(inputs.values()))
    for got, want in zip(ours, theirs):
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return list(ours)


RNG = np.random.default_rng(0)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis,keepdims,last", [(1, 1, 0), (-1, 0, 1), (0, 0, 0)])
def test_arg_extreme_with_ties(op, axis, keepdims, last):
    x = RNG.integers(0, 3, (3, 5, 4)).astype(np.float32)  # many ties: first vs last position matters
    check(helper.make_node(op, ["x"], ["y"], axis=axis, keepdims=keepdims, select_last_index=last),
          {"x": x}, {"y": I64}, opset=13)


@pytest.mark.parametrize("upper,k", [(1, 0), (0, -1), (1, 2), (0, 7)])
def test_trilu(upper, k):
    x = RNG.standard_normal((2, 4, 5)).astype(np.float32)
    check(helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper), {"x": x, "k": np.array(k, np.int64)},
          {"y": F32}, opset=14)


def test_eye_like_off_diagonal_with_dtype():
    check(helper.make_node("EyeLike", ["x"], ["y"], k=-1, dtype=onnx.TensorProto.INT32),
          {"x": np.zeros((4, 3), np.float32)}, {"y": onnx.TensorProto.INT32}, opset=9)


@pytest.mark.parametrize("batch_dims,indices", [
    (0, np.array([[1, -1], [0, 2]], np.int64)),  # whole-element tuples, a negative index
    (0, np.array([[[1]], [[-2]]], np.int64)),  # slices of the rest
    (1, np.array([[1], [0]], np.int64)),
])
def test_gather_nd(batch_dims, indices):
    data = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    if batch_dims == 0 and indices.shape[-1] == 2:
        data = data[:, :3, :3].copy()
    check(helper.make_node("GatherND", ["d", "i"], ["y"], batch_dims=batch_dims), {"d": data, "i": indices},
          {"y": F32}, opset=13)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot_negative_and_out_of_range(axis):
    indices = np.array([[0, -1, 3], [5, 2, -4]], np.int64)  # 5 is out of range (an all-off row)
    check(helper.make_node("OneHot", ["i", "depth", "v"], ["y"], axis=axis),
          {"i": indices, "depth": np.array(4, np.int64), "v": np.array([-2, 3], np.float32)}, {"y": F32}, opset=11)


@pytest.mark.parametrize("time_axis,batch_axis", [(0, 1), (1, 0)])
def test_reverse_sequence(time_axis, batch_axis):
    x = RNG.standard_normal((4, 4, 2)).astype(np.float32)
    check(helper.make_node("ReverseSequence", ["x", "n"], ["y"], time_axis=time_axis, batch_axis=batch_axis),
          {"x": x, "n": np.array([4, 1, 0, 3], np.int64)}, {"y": F32}, opset=10)


@pytest.mark.parametrize("op,opset", [("CumSum", 14), ("CumProd", 26)])
@pytest.mark.parametrize("axis,exclusive,reverse", [(0, 0, 0), (1, 1, 0), (-1, 0, 1), (1, 1, 1)])
def test_cumulative(op, opset, axis, exclusive, reverse):
    x = RNG.uniform(0.5, 1.5, (3, 5)).astype(np.float32)
    node = helper.make_node(op, ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)
    try:
        check(node, {"x": x, "axis": np.array(axis, np.int64)}, {"y": F32}, opset=opset)
    except ort.capi.onnxruntime_pybind11_state.NotImplemented:
        pytest.skip(f"this onnxruntime has no {op} at opset {opset}")


@pytest.mark.parametrize("axis,largest,k", [(-1, 1, 3), (0, 0, 2), (1, 1, 6)])
def test_top_k_with_ties(axis, largest, k):
    x = RNG.integers(0, 4, (3, 6)).astype(np.float32)  # ties: equal values come out in index order
    check(helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest),
          {"x": x, "k": np.array([min(k, x.shape[axis])], np.int64)}, {"v": F32, "i": I64}, opset=11)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, -1])
def test_scatter_elements_duplicates_and_negative_indices(reduction, axis):
    data = RNG.standard_normal((4, 5)).astype(np.float32)
    indices = np.array([[1, -1, 1], [0, 3, 3]], np.int64)  # duplicates along both axes; shorter than data
    updates = RNG.standard_normal(indices.shape).astype(np.float32)
    check(helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=axis, reduction=reduction),
          {"d": data, "i": indices, "u": updates}, {"y": F32}, opset=18)


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
@pytest.mark.parametrize("indices", [np.array([[1], [-3], [1]], np.int64), np.array([[0, 2], [2, 1], [0, 2]], np.int64)])
def test_scatter_nd(reduction, indices):
    data = RNG.standard_normal((3, 4)).astype(np.float32)
    updates = RNG.standard_normal(indices.shape[:-1] + data.shape[indices.shape[-1]:]).astype(np.float32)
    if reduction == "none":  # ONNX leaves duplicates undefined without a reduction: keep the tuples distinct
        indices, updates = indices[:2], updates[:2]
    check(helper.make_node("ScatterND", ["d", "i", "u"], ["y"], reduction=reduction),
          {"d": data, "i": indices, "u": updates}, {"y": F32}, opset=18)


def test_scatter_opset9_is_scatter_elements():
    data = np.zeros((3, 3), np.float32)
    check(helper.make_node("Scatter", ["d", "i", "u"], ["y"], axis=1),
          {"d": data, "i": np.array([[1, 0, 2]], np.int64), "u": np.ones((1, 3), np.float32)}, {"y": F32}, opset=9)


@pytest.mark.parametrize("equation,shapes", [
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),  # batched matmul through an ellipsis
    ("ij,jk", [(3, 4), (4, 2)]),  # implicit output: letters used once, sorted
    ("bii->bi", [(2, 3, 3)]),  # a diagonal
    ("i,i->", [(5,), (5,)]),
    ("ijk->kji", [(2, 3, 4)]),
])
def test_einsum(equation, shapes):
    feeds = {f"x{k}": RNG.standard_normal(s).astype(np.float32) for k, s in enumerate(shapes)}
    check(helper.make_node("Einsum", list(feeds), ["y"], equation=equation), feeds, {"y": F32}, opset=12)


@pytest.mark.parametrize("shape,axes", [([3, 7], None), ([6, 2], [0, 1]), ([4], [-1])])
def test_center_crop_pad(shape, axes):
    x = RNG.standard_normal((5, 4)).astype(np.float32)  # odd differences: the extra element goes last
    attrs = {} if axes is None else {"axes": axes}
    check(helper.make_node("CenterCropPad", ["x", "s"], ["y"], **attrs), {"x": x, "s": np.array(shape, np.int64)},
          {"y": F32}, opset=18)


def test_pad_wrap():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    check(helper.make_node("Pad", ["x", "p"], ["y"], mode="wrap"), {"x": x, "p": np.array([1, 2, 2, 4], np.int64)},
          {"y": F32}, opset=19)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_reduce_extreme_over_bool(op):
    x = np.array([[True, False, False], [True, True, True], [False, False, False]])
    check(helper.make_node(op, ["x", "axes"], ["y"], keepdims=0), {"x": x, "axes": np.array([1], np.int64)},
          {"y": onnx.TensorProto.BOOL}, opset=20)


def test_reshape_of_an_empty_tensor():
    x = np.zeros((0, 3, 4), np.float32)
    check(helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=1), {"x": x, "s": np.array([3, 4, 0], np.int64)},
          {"y": F32}, opset=14)


@pytest.mark.parametrize("x", [RNG.integers(-1, 2, (3, 4)).astype(np.float32), np.zeros((2, 3), bool),
                               np.array([[True, False], [True, True]])])
def test_non_zero_trims_to_the_data(x):
    (got,) = check(helper.make_node("NonZero", ["x"], ["y"]), {"x": x}, {"y": I64}, opset=13)
    np.testing.assert_array_equal(got, np.array(np.nonzero(x)))


@pytest.mark.parametrize("axis,condition", [(None, [0, 1, 1, 0, 1]), (0, [1, 0, 1]), (1, [0, 0]),
                                            (-1, [1, 1, 0, 1])])
def test_compress(axis, condition):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    attrs = {} if axis is None else {"axis": axis}
    check(helper.make_node("Compress", ["x", "c"], ["y"], **attrs), {"x": x, "c": np.array(condition, bool)},
          {"y": F32}, opset=11)


def test_trim_bounded_keeps_the_valid_part_along_the_axis():
    from core.runtime.loader import trim_bounded

    padded = np.arange(12).reshape(3, 4)
    out = trim_bounded({"y": padded, "y::bound": np.array([1, 2], np.int64), "z": padded})
    assert set(out) == {"y", "z"}
    np.testing.assert_array_equal(out["y"], padded[:, :2])
    np.testing.assert_array_equal(out["z"], padded)


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("keep_sorted", [0, 1])
def test_unique_all_outputs(axis, keep_sorted):
    x = RNG.integers(0, 3, (4, 3)).astype(np.float32)
    x[2] = x[0]  # a repeated row and column for the axis cases
    x[:, 2] = x[:, 1]
    attrs = {"sorted": keep_sorted} if axis is None else {"sorted": keep_sorted, "axis": axis}
    check(helper.make_node("Unique", ["x"], ["y", "indices", "inverse", "counts"], **attrs), {"x": x},
          {"y": F32, "indices": I64, "inverse": I64, "counts": I64}, opset=11)


@pytest.mark.parametrize("center,score_threshold,max_output", [(0, None, 3), (1, 0.3, 2), (0, 0.5, 10), (0, None, 0)])
def test_non_max_suppression(center, score_threshold, max_output):
    rng = np.random.default_rng(1)
    corners = rng.uniform(0, 4, (2, 8, 2, 2)).astype(np.float32)  # overlapping boxes, corners in any order
    boxes = corners.reshape(2, 8, 4)
    if center:
        boxes[..., 2:] = np.abs(boxes[..., 2:])  # width and height
    scores = rng.uniform(0, 1, (2, 3, 8)).astype(np.float32)
    scores[0, 0, 5] = scores[0, 0, 2]  # a tie: the lower index goes first
    inputs = {"boxes": boxes, "scores": scores, "max_output": np.array([max_output], np.int64),
              "iou": np.array([0.4], np.float32)}
    names = ["boxes", "scores", "max_output", "iou"]
    if score_threshold is not None:
        inputs["score"] = np.array([score_threshold], np.float32)
        names.append("score")
    check(helper.make_node("NonMaxSuppression", names, ["selected"], center_point_box=center), inputs,
          {"selected": I64}, opset=11)


@pytest.mark.parametrize("mode,write", [("linear", [0, 2]), ("circular", [3, 5])])
def test_tensor_scatter_matches_the_spec_pseudocode(mode, write):
    cache = RNG.standard_normal((2, 3, 5, 4)).astype(np.float32)
    update = RNG.standard_normal((2, 3, 3, 4)).astype(np.float32)
    write = np.array(write, np.int64)
    node = helper.make_node("TensorScatter", ["cache", "update", "write"], ["y"], mode=mode)
    model = _model(node, {"cache": cache, "update": update, "write": write}, {"y": F32}, 24, [cache.shape])
    (got,) = KilnBackend.run_model(model, [cache, update, write])
    want = cache.copy()  # the ONNX spec's loop, with the sequence axis at -2
    for prefix in np.ndindex(*cache.shape[:2]):
        for s in range(update.shape[2]):
            at = write[prefix[0]] + s
            want[prefix + ((at % cache.shape[2]) if mode == "circular" else at,)] = update[prefix + (s,)]
    np.testing.assert_array_equal(got, want)


def test_cumsum_between_elementwise_ops_on_a_long_middle_axis():
    """The scan is its own kernel: the Relu before and the Neg after are not fused into its loops."""
    x = RNG.standard_normal((2, 300, 3)).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("CumSum", ["r", "axis"], ["c"], reverse=1),
             helper.make_node("Neg", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", F32, x.shape)],
                              [helper.make_tensor_value_info("y", F32, x.shape)],
                              [onnx.numpy_helper.from_array(np.array(1, np.int64), "axis")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    (got,) = KilnBackend.run_model(model, [x])
    want = -np.flip(np.cumsum(np.flip(np.maximum(x, 0), 1), 1), 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_top_k_middle_axis_of_a_long_line():
    x = RNG.integers(0, 50, (2, 700, 3)).astype(np.float32)  # many ties among 700 elements
    check(helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=0),
          {"x": x, "k": np.array([9], np.int64)}, {"v": F32, "i": I64}, opset=11)
