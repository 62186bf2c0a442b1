"""ai.onnx.ml opset 5 TreeEnsemble built with onnx.helper, imported and evaluated (numpy reference) and compiled to
native code, against ONNX Runtime: every branch mode, set membership, modes mixed in one ensemble, aggregates,
float and double (scores within 1e-5), and the refusals (post transforms among them)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import core
from core.errors import KilnError, UnsupportedOpError
from core.frontend import import_onnx
from core.graph.interpret import evaluate

ML = "ai.onnx.ml"
LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)


def ensemble_model(modes: list[int], dtype=np.float32, aggregate: int = 1, transform: int = 0,
                   targets: int = 2, **attrs) -> onnx.ModelProto:
    """Two trees over 3 features: tree 0 has nodes 0-2 (node 0's true child node 1, false child node 2) and
    leaves 0-3; tree 1 is node 3 with leaves 4 and 5. `modes` gives the four nodes' modes."""
    splits = np.asarray([0.0, 0.5, -0.25, 1.0], dtype)
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node_attrs = dict(
        tree_roots=[0, 3], nodes_featureids=[0, 1, 2, 2], nodes_splits=numpy_helper.from_array(splits),
        nodes_modes=numpy_helper.from_array(np.asarray(modes, np.uint8)),
        nodes_truenodeids=[1, 0, 2, 4], nodes_trueleafs=[0, 1, 1, 1],
        nodes_falsenodeids=[2, 1, 3, 5], nodes_falseleafs=[0, 1, 1, 1],
        nodes_missing_value_tracks_true=[0, 1, 0, 1],
        leaf_targetids=[0, 1, 0, 1, 0, 1] if targets > 1 else [0] * 6,
        leaf_weights=numpy_helper.from_array(np.asarray([1.0, -2.0, 3.5, 0.25, -0.75, 2.0], dtype)),
        n_targets=targets, aggregate_function=aggregate, post_transform=transform)
    if MEMBER in modes:
        sets = [[0.0, 1.0], [2.0], [-1.0, 2.0, 1.0], [1.0, -1.0]]  # ONNX Runtime takes integer members only
        values = [v for i, m in enumerate(modes) if m == MEMBER for v in sets[i] + [np.nan]][:-1]
        node_attrs["membership_values"] = numpy_helper.from_array(np.asarray(values, dtype))
    node_attrs.update(attrs)
    node = helper.make_node("TreeEnsemble", ["x"], ["y"], domain=ML, **node_attrs)
    graph = helper.make_graph([node], "trees", [helper.make_tensor_value_info("x", elem, [None, 3])],
                              [helper.make_tensor_value_info("y", elem, [None, targets])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(ML, 5)])
    model.ir_version = 10
    return model


def probe_rows(dtype=np.float32) -> np.ndarray:
    rng = np.random.default_rng(5)
    x = rng.choice([-1.0, -0.25, 0.0, 0.5, 1.0, 2.0], size=(48, 3)).astype(dtype)  # hits every split exactly
    x[::5, 1] = np.nan
    x[::6, 2] = np.nan
    x[::7, 0] = np.nan
    return x


def onnxruntime_output(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def compare(model: onnx.ModelProto, x: np.ndarray) -> None:
    want = onnxruntime_output(model, x)
    got = evaluate(import_onnx(model, {"x": x.shape}), {"x": x})["y"]
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", [LEQ, LT, GTE, GT, EQ, NEQ, MEMBER],
                         ids=["leq", "lt", "gte", "gt", "eq", "neq", "member"])
@pytest.mark.parametrize("aggregate", [0, 1, 2, 3], ids=["average", "sum", "min", "max"])
def test_each_mode_and_aggregate_matches_onnxruntime(mode, aggregate):
    compare(ensemble_model([mode] * 4, aggregate=aggregate, targets=1), probe_rows())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("modes", [[LEQ, GT, LT, GTE], [EQ, NEQ, LEQ, GT], [MEMBER, LT, NEQ, MEMBER],
                                   [MEMBER, MEMBER, EQ, GTE]], ids=["orders", "equality", "member_lt", "member_eq"])
def test_mixed_modes_match_onnxruntime(modes, dtype):
    compare(ensemble_model(modes, dtype), probe_rows(dtype))


@pytest.mark.parametrize("transform", [1, 2, 3, 4], ids=["softmax", "logistic", "softmax_zero", "probit"])
def test_post_transforms_are_refused_with_the_export_fix(transform):
    """ONNX numbers SOFTMAX 1 and LOGISTIC 2; ONNX Runtime 1.32 reads them the other way round (and skips LOGISTIC
    for one target, onnxruntime#26596), so no transform matches both."""
    with pytest.raises(UnsupportedOpError, match=r"TreeEnsemble.*post_transform NONE \(0\) and apply Softmax"):
        import_onnx(ensemble_model([LEQ] * 4, transform=transform), {"x": (4, 3)})


def test_thresholds_at_infinity_match_onnxruntime():
    splits = numpy_helper.from_array(np.asarray([-np.inf, np.inf, -np.inf, 0.0], np.float32))
    x = probe_rows()
    x[::4, 0], x[::3, 2], x[1::4, 1] = -np.inf, -np.inf, np.inf
    compare(ensemble_model([LT, GTE, EQ, LEQ], nodes_splits=splits), x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compiled_mixed_and_member_modes_match_onnxruntime(dtype, tmp_path):
    model = ensemble_model([MEMBER, GT, EQ, LT], dtype)
    x = np.tile(probe_rows(dtype), (4, 1))
    artifact = core.compile(model, input_shapes={"x": x.shape}, benchmark=False)
    artifact.save(tmp_path / "model.tar.gz")
    got = core.runtime.load(tmp_path / "model.tar.gz").run({"x": x})["y"]
    np.testing.assert_allclose(np.asarray(got), onnxruntime_output(model, x), rtol=1e-5, atol=1e-5)


def test_refusals_name_the_problem():
    with pytest.raises(KilnError, match="membership_values holds 1 sets for 2"):
        import_onnx(ensemble_model([MEMBER, LEQ, LEQ, MEMBER],
                                   membership_values=numpy_helper.from_array(np.asarray([1.0], np.float32))),
                    {"x": (4, 3)})
    with pytest.raises(KilnError, match="leaf 9"):
        import_onnx(ensemble_model([LEQ] * 4, nodes_falsenodeids=[2, 1, 3, 9]), {"x": (4, 3)})
