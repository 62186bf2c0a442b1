"""Backend.unsupported_ops: what a target cannot compile is refused up front, all ops listed, and the list stays true."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import core
from core.backends import get_backend
from core.errors import ScheduleError, UnsupportedOnTargetError
from core.frontend import import_onnx
from tests.backend_calls import optimize, build_executable
from core.runtime import load
from core.target import get_target


def _value(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(initializers)),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _k(value, name):
    return numpy_helper.from_array(np.array(value, np.int64), name)


# One small model per op the cuda backend declares unsupported (a sample: the others share their kernels).
MODELS = {
    "TopK": lambda: _model([helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1)], [_value("x", [2, 8])],
                           [_value("v", [2, 3]), _value("i", [2, 3], TensorProto.INT64)], [_k([3], "k")]),
    "CumSum": lambda: _model([helper.make_node("CumSum", ["x", "a"], ["y"])], [_value("x", [2, 8])],
                             [_value("y", [2, 8])], [_k(1, "a")]),
    "NonZero": lambda: _model([helper.make_node("NonZero", ["x"], ["y"])], [_value("x", [2, 8])],
                              [_value("y", [2, "n"], TensorProto.INT64)]),
    "Unique": lambda: _model([helper.make_node("Unique", ["x"], ["y"], sorted=1)], [_value("x", [8])],
                             [_value("y", ["n"])]),
}


@pytest.mark.parametrize("op", sorted(MODELS))
def test_the_cuda_list_names_ops_its_schedules_really_refuse(op):
    """Without the up-front check, scheduling these for cuda fails with internal jargon: the list is needed."""
    cuda = get_target("cuda")
    assert op in get_backend(cuda).unsupported_ops
    graph = optimize(import_onnx(MODELS[op]()), 0, cuda)
    with pytest.raises(ScheduleError):
        build_executable(graph, cuda)


def test_compile_for_cuda_lists_every_unsupported_op_before_any_work():
    model = _model([helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1),
                    helper.make_node("CumSum", ["v", "a"], ["c"])],
                   [_value("x", [2, 8])], [_value("c", [2, 3]), _value("i", [2, 3], TensorProto.INT64)],
                   [_k([3], "k"), _k(1, "a")])
    with pytest.raises(UnsupportedOnTargetError) as refused:
        core.compile(model, target="cuda", opt_level=0)
    assert refused.value.code == "unsupported_on_target" and refused.value.ops == ["CumSum", "TopK"]
    assert str(refused.value).startswith("target cuda cannot compile these ops: CumSum, TopK")
    assert "extern" not in str(refused.value) and "schedule" not in str(refused.value)


def test_cpu_targets_compile_what_cuda_refuses(tmp_path):
    import onnxruntime as ort

    model = MODELS["TopK"]()
    assert not get_backend(get_target("native")).unsupported_ops
    artifact = core.compile(model, target="native", opt_level=0, benchmark=False)
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = load(artifact.save(tmp_path / "topk.tar.gz")).run({"x": x})
    np.testing.assert_allclose(got["v"], expected[0], rtol=1e-6)
    np.testing.assert_array_equal(got["i"], expected[1])


def test_internal_errors_are_said_as_internal_not_as_scheduling_jargon():
    from core.errors import InvalidModelError, message_for_users

    said = message_for_users(ScheduleError("compute_at: unique_indices is an argument of the kernel"))
    assert said.startswith("Kiln failed to generate code for this model (an internal compiler error, schedule_error)")
    assert message_for_users(InvalidModelError("not an ONNX model")) == "not an ONNX model"
