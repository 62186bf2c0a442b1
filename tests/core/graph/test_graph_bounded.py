"""Data-dependent sizes feeding further ops (core/graph/bounded.py): small onnx.helper models compiled end
to end and compared with ONNX Runtime at the true sizes, each on several inputs including one where
nothing is selected."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from core.errors import KilnError
from core.onnx_backend.backend import KilnBackend

F32, I64 = TensorProto.FLOAT, TensorProto.INT64
RNG = np.random.default_rng(7)


def _model(nodes, inputs: dict, outputs: dict, initializers=(), opset: int = 17) -> onnx.ModelProto:
    """inputs: name -> (elem type, shape); outputs: name -> (elem type, rank) with every dim unknown."""
    graph = helper.make_graph(
        nodes, "bounded", [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(n, t, [None] * r) for n, (t, r) in outputs.items()], list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _const(name: str, values, dtype=np.int64) -> onnx.TensorProto:
    return onnx.numpy_helper.from_array(np.asarray(values, dtype), name)


def _matches_onnxruntime(model: onnx.ModelProto, feeds: list[dict], tolerance: float = 1e-5) -> list[list]:
    """Compiles once, runs every feed through Kiln and ORT; returns Kiln's outputs per feed."""
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = KilnBackend.prepare(model)
    results = []
    for feed in feeds:
        want = theirs.run(None, feed)
        got = compiled.run([feed[i.name] for i in model.graph.input])
        for name, g, w in zip([o.name for o in model.graph.output], got, want):
            assert g.shape == w.shape and g.dtype == w.dtype, (name, g.shape, w.shape, g.dtype, w.dtype)
            np.testing.assert_allclose(g, w, rtol=tolerance, atol=tolerance, err_msg=name)
        results.append(got)
    return results


def test_non_zero_transpose_gather_nd_reduce_sum():
    nodes = [helper.make_node("Greater", ["x", "half"], ["keep"]),
             helper.make_node("NonZero", ["keep"], ["where"]),
             helper.make_node("Transpose", ["where"], ["coords"], perm=[1, 0]),
             helper.make_node("GatherND", ["x", "coords"], ["picked"]),
             helper.make_node("ReduceSum", ["picked"], ["total"], keepdims=0),
             helper.make_node("ReduceMean", ["picked", "axis0"], ["mean"], keepdims=1),
             helper.make_node("ReduceMax", ["picked", "axis0"], ["top"], keepdims=0)]
    model = _model(nodes, {"x": (F32, [4, 5])}, {"picked": (F32, 1), "total": (F32, 0), "mean": (F32, 1),
                                                "top": (F32, 0), "coords": (I64, 2)},
                   [_const("half", 0.5, np.float32), _const("axis0", [0])], opset=18)
    x = RNG.standard_normal((4, 5)).astype(np.float32)
    nothing = np.zeros((4, 5), np.float32)
    one = np.zeros((4, 5), np.float32)
    one[2, 3] = 3.0
    # the mean and the max of nothing are NaN and -inf/NaN in ORT: only compared where something is picked
    outs = _matches_onnxruntime(model, [{"x": x}, {"x": one}])
    assert outs[1][0].shape == (1,) and outs[1][1] == 3.0
    model_sum = _model(nodes[:5], {"x": (F32, [4, 5])}, {"picked": (F32, 1), "total": (F32, 0)},
                       [_const("half", 0.5, np.float32)], opset=18)
    (empty,) = _matches_onnxruntime(model_sum, [{"x": nothing}])
    assert empty[0].shape == (0,) and empty[1] == 0.0


def test_top_k_with_k_from_shape_and_min():
    nodes = [helper.make_node("Greater", ["x", "zero"], ["keep"]),
             helper.make_node("Compress", ["x", "keep"], ["scores"], axis=0),
             helper.make_node("Shape", ["scores"], ["n"]),
             helper.make_node("Min", ["n", "five"], ["k"]),
             helper.make_node("TopK", ["scores", "k"], ["values", "indices"]),
             helper.make_node("Gather", ["x", "indices"], ["again"])]
    model = _model(nodes, {"x": (F32, [12])}, {"values": (F32, 1), "indices": (I64, 1), "again": (F32, 1)},
                   [_const("zero", 0.0, np.float32), _const("five", [5])])
    many = np.abs(RNG.standard_normal(12)).astype(np.float32) + 0.1
    few = -many
    few[[3, 8]] = [0.5, 2.0]
    outs = _matches_onnxruntime(model, [{"x": many}, {"x": few}, {"x": -many}])
    assert [o[0].shape[0] for o in outs] == [5, 2, 0]


def test_nms_then_gather_boxes_scores_and_labels_then_concat():
    """The postprocessing of torchvision and YOLO exports: detections = [box, score, label] rows."""
    nodes = [helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "threshold"], ["selected"]),
             helper.make_node("Gather", ["selected", "two"], ["box_index"], axis=1),
             helper.make_node("Gather", ["selected", "one"], ["label"], axis=1),
             helper.make_node("Squeeze", ["boxes", "axis0"], ["all_boxes"]),
             helper.make_node("Gather", ["all_boxes", "box_index"], ["picked"], axis=0),
             helper.make_node("GatherND", ["scores", "selected"], ["score"]),
             helper.make_node("Unsqueeze", ["score", "axis1"], ["score_column"]),
             helper.make_node("Cast", ["label"], ["label_float"], to=F32),
             helper.make_node("Unsqueeze", ["label_float", "axis1"], ["label_column"]),
             helper.make_node("Concat", ["picked", "score_column", "label_column"], ["detections"], axis=1)]
    model = _model(nodes, {"boxes": (F32, [1, 10, 4]), "scores": (F32, [1, 3, 10])},
                   {"detections": (F32, 2), "label": (I64, 1)},
                   [_const("max_out", [4]), _const("iou", [0.5], np.float32), _const("threshold", [0.3], np.float32),
                    _const("two", 2), _const("one", 1), _const("axis0", [0]), _const("axis1", [1])], opset=13)
    corners = RNG.uniform(0, 10, (1, 10, 2, 2)).astype(np.float32)
    boxes = np.concatenate([corners.min(axis=2), corners.max(axis=2)], axis=-1).reshape(1, 10, 4)
    scores = RNG.uniform(0, 1, (1, 3, 10)).astype(np.float32)
    outs = _matches_onnxruntime(model, [{"boxes": boxes, "scores": scores},
                                        {"boxes": boxes, "scores": scores * 0.5},
                                        {"boxes": boxes, "scores": scores * 0.1}])  # no detection
    assert outs[0][0].shape[0] > outs[1][0].shape[0] > 0 and outs[2][0].shape == (0, 6)


def test_nms_over_a_data_dependent_number_of_boxes():
    """Boxes kept by a data-dependent filter go to NMS without a score threshold: only the valid ones may
    be selected; 37 boxes (runs of odd lengths in the merge sort) with tied scores."""
    nodes = [helper.make_node("Greater", ["flags", "zero"], ["keep"]),
             helper.make_node("Compress", ["boxes", "keep"], ["kept_boxes"], axis=1),
             helper.make_node("Compress", ["scores", "keep"], ["kept_scores"], axis=2),
             helper.make_node("NonMaxSuppression", ["kept_boxes", "kept_scores", "max_out", "iou"], ["selected"])]
    model = _model(nodes, {"boxes": (F32, [1, 37, 4]), "scores": (F32, [1, 2, 37]), "flags": (F32, [37])},
                   {"selected": (I64, 2)}, [_const("zero", 0.0, np.float32), _const("max_out", [40]),
                                            _const("iou", [0.3], np.float32)], opset=13)
    corners = RNG.uniform(0, 10, (1, 37, 2, 2)).astype(np.float32)
    boxes = np.concatenate([corners.min(axis=2), corners.max(axis=2)], axis=-1).reshape(1, 37, 4)
    scores = RNG.integers(0, 5, (1, 2, 37)).astype(np.float32) / 4  # many ties: the lower index goes first
    flags = RNG.standard_normal(37).astype(np.float32)
    outs = _matches_onnxruntime(model, [{"boxes": boxes, "scores": scores, "flags": flags},
                                        {"boxes": boxes, "scores": scores, "flags": np.abs(flags)},
                                        {"boxes": boxes, "scores": scores, "flags": -np.abs(flags)}])
    assert outs[2][0].shape == (0, 3) and outs[1][0].shape[0] > outs[0][0].shape[0] > 0


def test_compress_then_softmax_and_concat_along_the_axis():
    nodes = [helper.make_node("Greater", ["flags", "zero"], ["keep"]),
             helper.make_node("Compress", ["x", "keep"], ["kept"], axis=1),
             helper.make_node("Softmax", ["kept"], ["probabilities"], axis=1),
             helper.make_node("Less", ["flags", "zero"], ["drop"]),
             helper.make_node("Compress", ["x", "drop"], ["dropped"], axis=1),
             helper.make_node("Concat", ["kept", "bias", "dropped"], ["joined"], axis=1),
             helper.make_node("ArgMax", ["joined"], ["best"], axis=1),
             helper.make_node("CumSum", ["joined", "axis1"], ["running"], reverse=1)]
    model = _model(nodes, {"x": (F32, [3, 6]), "flags": (F32, [6])},
                   {"probabilities": (F32, 2), "joined": (F32, 2), "best": (I64, 2), "running": (F32, 2)},
                   [_const("zero", 0.0, np.float32), _const("bias", np.ones((3, 2)), np.float32),
                    _const("axis1", 1)])
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    flags = np.array([1, -1, 0.5, -2, 3, -0.5], np.float32)
    outs = _matches_onnxruntime(model, [{"x": x, "flags": flags}, {"x": x, "flags": np.abs(flags)},
                                        {"x": x, "flags": -np.abs(flags)}])
    assert outs[2][0].shape == (3, 0) and outs[1][1].shape == (3, 8)


def test_concat_along_the_axis_as_an_offset_copy_and_as_a_compacting_gather():
    """A bounded first part then static ones (an offset copy), and a static first part or a bounded part in the
    middle (the compacting gather)."""
    nodes = [helper.make_node("Greater", ["flags", "zero"], ["keep"]),
             helper.make_node("Compress", ["x", "keep"], ["kept"], axis=1),
             helper.make_node("Less", ["flags", "zero"], ["drop"]),
             helper.make_node("Compress", ["x", "drop"], ["dropped"], axis=1),
             helper.make_node("Concat", ["kept", "bias", "ones"], ["offset"], axis=1),
             helper.make_node("Concat", ["kept", "dropped", "bias"], ["middle"], axis=1),
             helper.make_node("Concat", ["bias", "kept"], ["after"], axis=1)]
    model = _model(nodes, {"x": (F32, [3, 6]), "flags": (F32, [6])},
                   {"offset": (F32, 2), "middle": (F32, 2), "after": (F32, 2)},
                   [_const("zero", 0.0, np.float32), _const("bias", RNG.standard_normal((3, 2)), np.float32),
                    _const("ones", np.ones((3, 1)), np.float32)])
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    flags = np.array([1, -1, 0.5, -2, 3, -0.5], np.float32)
    outs = _matches_onnxruntime(model, [{"x": x, "flags": flags}, {"x": x, "flags": np.abs(flags)},
                                        {"x": x, "flags": -np.abs(flags)}])
    assert [o[0].shape for o in outs] == [(3, 6), (3, 9), (3, 3)]


def test_selected_rows_through_matmul_slice_reshape_and_a_row_reduction():
    """Rows pass through (MatMul rows, Slice keeping the first 3, Reshape splitting the other axis,
    a reduction over the other axis); a MatMul over them (x^T x) masks the padding."""
    nodes = [helper.make_node("Greater", ["flags", "zero"], ["keep"]),
             helper.make_node("Compress", ["x", "keep"], ["rows"], axis=0),
             helper.make_node("MatMul", ["rows", "w"], ["projected"]),
             helper.make_node("Slice", ["projected", "start", "three", "axis0"], ["first"]),
             helper.make_node("Reshape", ["first", "split"], ["split_rows"]),
             helper.make_node("ReduceMax", ["split_rows", "axis2"], ["row_max"], keepdims=0),
             helper.make_node("Transpose", ["rows"], ["columns"], perm=[1, 0]),
             helper.make_node("MatMul", ["columns", "rows"], ["gram"])]
    model = _model(nodes, {"x": (F32, [7, 4]), "flags": (F32, [7])},
                   {"first": (F32, 2), "row_max": (F32, 2), "gram": (F32, 2)},
                   [_const("zero", 0.0, np.float32), _const("w", RNG.standard_normal((4, 6)), np.float32),
                    _const("start", [0]), _const("three", [3]), _const("axis0", [0]), _const("split", [0, 2, 3]),
                    _const("axis2", [2])], opset=18)
    x = RNG.standard_normal((7, 4)).astype(np.float32)
    flags = np.array([1, -1, 1, 1, -1, 1, 1], np.float32)
    few = np.array([-1, -1, 1, -1, -1, -1, 1], np.float32)
    outs = _matches_onnxruntime(model, [{"x": x, "flags": flags}, {"x": x, "flags": few},
                                        {"x": x, "flags": -np.ones(7, np.float32)}], tolerance=1e-4)
    assert [o[0].shape[0] for o in outs] == [3, 2, 0]


def test_torchvision_postprocessing_patterns():
    """What torchvision exports around its data-dependent values: ConstantOfShape(Shape(x)) and Expand to a
    run-time shape, a reshape merging the data-dependent axis with the next, a slice to a run-time end,
    ScatterElements with data-dependent indices, and an If whose branches differ in length."""
    empty = helper.make_tensor("empty", F32, [0], [])
    then_branch = helper.make_graph([helper.make_node("Identity", ["values"], ["chosen"])], "then", [],
                                    [helper.make_tensor_value_info("chosen", F32, None)])
    else_branch = helper.make_graph([helper.make_node("Constant", [], ["nothing"], value=empty)], "else", [],
                                    [helper.make_tensor_value_info("nothing", F32, None)])
    nodes = [helper.make_node("Greater", ["x", "zero"], ["keep"]),
             helper.make_node("NonZero", ["keep"], ["where"]),
             helper.make_node("Squeeze", ["where", "axis0"], ["index"]),
             helper.make_node("Gather", ["x", "index"], ["values"]),
             helper.make_node("Shape", ["values"], ["count"]),
             helper.make_node("ConstantOfShape", ["count"], ["labels"], value=helper.make_tensor("v", I64, [1], [7])),
             helper.make_node("Unsqueeze", ["values", "axis1"], ["column"]),
             helper.make_node("Concat", ["count", "three"], ["wide"], axis=0),
             helper.make_node("Expand", ["column", "wide"], ["rows"]),
             helper.make_node("Reshape", ["rows", "flat"], ["flattened"]),
             helper.make_node("Slice", ["flattened", "axis0", "count", "axis0"], ["tail"]),
             helper.make_node("ScatterElements", ["zeros", "index", "values"], ["placed"], axis=0),
             helper.make_node("Cast", ["keep"], ["kept"], to=F32),
             helper.make_node("ReduceSum", ["kept"], ["how_many"], keepdims=0),
             helper.make_node("Greater", ["how_many", "two"], ["several"]),
             helper.make_node("If", ["several"], ["picked"], then_branch=then_branch, else_branch=else_branch)]
    model = _model(nodes, {"x": (F32, [8])}, {"labels": (I64, 1), "rows": (F32, 2), "tail": (F32, 1),
                                             "placed": (F32, 1), "picked": (F32, 1)},
                   [_const("zero", 0.0, np.float32), _const("two", 2.0, np.float32), _const("axis0", [0]),
                    _const("axis1", [1]), _const("three", [3]), _const("flat", [-1]),
                    _const("zeros", np.zeros(8), np.float32)], opset=13)
    x = RNG.standard_normal(8).astype(np.float32)
    x[:3] = [1.0, -1.0, 2.0]
    one = np.full(8, -1.0, np.float32)
    one[5] = 4.0
    outs = _matches_onnxruntime(model, [{"x": x}, {"x": one}, {"x": -np.abs(x)}])
    assert outs[1][4].shape == (0,) and outs[2][0].shape == (0,)


def test_tile_and_flatten_along_a_data_dependent_axis_lay_it_out_as_the_true_size_would():
    """Tile repeats the selected columns, Flatten merges them behind the rows: the merged axis is compacted
    (rows at the actual length apart), and a Reshape back to rows x columns spreads it out again (changed on
    purpose: Tile along such an axis used to be refused)."""
    nodes = [helper.make_node("NonZero", ["x"], ["n"]),
             helper.make_node("Tile", ["n", "reps"], ["tiled"]),
             helper.make_node("Flatten", ["n"], ["flat"], axis=0),
             helper.make_node("Shape", ["n"], ["shape"]),
             helper.make_node("Reshape", ["flat", "shape"], ["back"]),
             helper.make_node("Mul", ["back", "three"], ["scaled"])]
    model = _model(nodes, {"x": (F32, [3, 4])}, {"tiled": (I64, 2), "flat": (I64, 2), "scaled": (I64, 2)},
                   [_const("reps", [1, 2]), _const("three", 3)], opset=13)
    x = (RNG.random((3, 4)) < 0.5).astype(np.float32)
    _matches_onnxruntime(model, [{"x": x}, {"x": np.zeros((3, 4), np.float32)}, {"x": np.ones((3, 4), np.float32)}])


@pytest.mark.parametrize("node,initializers,message", [
    (helper.make_node("Pad", ["n", "pads"], ["y"]), [_const("pads", [0, 1, 0, 1])],
     r"Pad cannot take .* data-dependent .*padding along the data-dependent axis"),
    (helper.make_node("Split", ["n"], ["y", "z"], axis=1), [], r"Split along axis 1, whose length is data-dependent"),
    (helper.make_node("OneHot", ["n", "depth", "values"], ["y"]), [_const("depth", 3), _const("values", [0, 1])],
     r"OneHot cannot take .*no run-time-length rule for this op"),
])
def test_an_op_that_cannot_take_a_run_time_length_is_named(node, initializers, message):
    outputs = {name: (I64, 3 if node.op_type == "OneHot" else 2) for name in node.output}
    model = _model([helper.make_node("NonZero", ["x"], ["n"]), node], {"x": (F32, [2, 2])}, outputs, initializers,
                   opset=13)
    with pytest.raises(KilnError, match=message):
        KilnBackend.prepare(model)
