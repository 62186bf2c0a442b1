"""Validation of an output whose shape differs from the reference's (issue 36, defect 10): reported as a shape
mismatch with both shapes, the node that made it and the side ONNX's reference evaluator (the spec) backs."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import core
from core.driver.tolerance import tolerance_for
from core.driver.validate import (Comparison, ReferenceEvaluatorSession, compare_output, explain_shape_mismatches,
                                  onnxruntime_session)
from core.errors import ValidationError

INT64_MAX = np.iinfo(np.int64).max


def reverse_slice_model() -> onnx.ModelProto:
    """x[-1:INT64_MAX:-1] over 167 elements: [] by the spec (ends clamp to 166 for a negative step); ONNX Runtime
    reads INT64_MAX as "to the far end" and returns all 167 reversed."""
    consts = [onnx.numpy_helper.from_array(np.array(v, np.int64), n)
              for n, v in (("starts", [-1]), ("ends", [INT64_MAX]), ("axes", [0]), ("steps", [-1]))]
    graph = helper.make_graph([helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"],
                                                name="reverse_slice")], "slice",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [167])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


def test_error_mode_names_both_shapes_the_node_and_the_side_that_follows_the_spec():
    with pytest.raises(ValidationError) as err:
        core.compile(reverse_slice_model(), benchmark=False)
    message = str(err.value)
    assert ("output 'y' (made by Slice node 'reverse_slice') has shape [0] in Kiln but [167] in ONNX Runtime; "
            "ONNX's reference evaluator (the spec) gives [0]: Kiln follows the spec, ONNX Runtime does not") in message
    assert "max abs error" not in message and "inf" not in message


def test_warn_mode_reports_the_mismatch_in_json_and_html():
    artifact = core.compile(reverse_slice_model(), benchmark=False, validate="warn")
    (output,) = artifact.report["validation"]["outputs"]
    assert output["passed"] is False
    assert output["shape_mismatch"] == {"kiln": [0], "reference": [167], "spec": [0],
                                        "node": "Slice node 'reverse_slice'", "follows_spec": "kiln"}
    assert "has shape [0] in Kiln but [167] in the reference: no element compares" in artifact.report_html
    assert "Kiln follows the spec, the reference does not" in artifact.report_html


def test_the_reference_can_be_the_side_that_follows_the_spec():
    model = reverse_slice_model()
    feeds = {"x": np.arange(167, dtype=np.float32)}
    session = ReferenceEvaluatorSession(model.SerializeToString())
    (ref,) = session.run(["y"], feeds)
    wrong = np.arange(167, dtype=np.float32)[::-1]  # what ONNX Runtime returns
    outputs = explain_shape_mismatches([compare_output("y", wrong, ref, tolerance_for(ref.dtype))], session, feeds)
    comparison = Comparison(float("inf"), float("inf"), False, "y", tuple(outputs), "onnx.reference")
    assert outputs[0].shape_mismatch.follows_spec() == "reference"
    assert comparison.message().endswith("gives [0]: onnx.reference follows the spec, Kiln does not")


def test_matching_shapes_and_an_unknown_spec():
    model = reverse_slice_model()
    feeds = {"x": np.arange(167, dtype=np.float32)}
    session = onnxruntime_session(model.SerializeToString(), 1)
    (ref,) = session.run(["y"], feeds)
    same = compare_output("y", ref.copy(), ref, tolerance_for(ref.dtype))
    assert same.passed and same.shape_mismatch is None
    assert explain_shape_mismatches([same], session, feeds) == [same]
    bad = compare_output("y", ref[:3], ref, tolerance_for(ref.dtype))
    (explained,) = explain_shape_mismatches([bad], object(), feeds)  # no model to ask: the spec stays unknown
    assert explained.shape_mismatch.follows_spec() == "unknown" and explained.shape_mismatch.node == ""
    assert "reference evaluator" not in Comparison(1.0, 1.0, False, "y", (explained,)).message()
