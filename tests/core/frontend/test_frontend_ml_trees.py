"""ai.onnx.ml tree ensembles imported and evaluated (the TreeEnsemble op's numpy reference) against ONNX
Runtime: skl2onnx, XGBoost and LightGBM exports (labels exactly, scores within float32 rounding), hand-built
ensembles for the modes, missing values and ONNX Runtime's binary-classifier rules, and the refusals."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from core.errors import UnsupportedOpError
from core.frontend import import_onnx
from core.graph.interpret import evaluate

sklearn = pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")
from sklearn.datasets import make_classification, make_regression  # noqa: E402
from sklearn.ensemble import (GradientBoostingClassifier, GradientBoostingRegressor,  # noqa: E402
                              RandomForestClassifier, RandomForestRegressor)

ML = "ai.onnx.ml"


def compare_with_onnxruntime(model: onnx.ModelProto, x: np.ndarray, rtol: float = 1e-5,
                             atol: float = 1e-5) -> None:
    """Import and evaluate `model` on rows `x`: integer outputs equal ONNX Runtime's, floats within tolerance."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    expected = session.run(None, {name: x})
    got = evaluate(import_onnx(model, {name: x.shape}), {name: x})
    for output, want in zip(session.get_outputs(), expected):
        have = got[output.name]
        if want.dtype.kind in "iu":
            np.testing.assert_array_equal(have.reshape(want.shape), want, err_msg=output.name)
        else:
            np.testing.assert_allclose(have.reshape(want.shape), want, rtol=rtol, atol=atol, err_msg=output.name)


def _classes(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    x, y = make_classification(160, 6, n_informative=4, n_classes=n, random_state=seed)
    return x.astype(np.float32), y


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("estimator", [
    lambda: RandomForestClassifier(6, max_depth=4, random_state=0),
    lambda: GradientBoostingClassifier(n_estimators=6, max_depth=3, random_state=0),
], ids=["random_forest", "gradient_boosting"])
def test_sklearn_classifiers_match_onnxruntime(estimator, classes):
    x, y = _classes(classes)
    model = skl2onnx.to_onnx(estimator().fit(x, y), x[:1], options={"zipmap": False})
    compare_with_onnxruntime(model, x)


@pytest.mark.parametrize("estimator", [
    lambda: RandomForestRegressor(5, max_depth=5, random_state=0),
    lambda: GradientBoostingRegressor(n_estimators=8, max_depth=3, random_state=0),
], ids=["random_forest", "gradient_boosting"])
def test_sklearn_regressors_match_onnxruntime(estimator):
    x, y = make_regression(120, 5, random_state=0)
    x = x.astype(np.float32)
    compare_with_onnxruntime(skl2onnx.to_onnx(estimator().fit(x, y), x[:1]), x, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("classes", [2, 4])
def test_xgboost_and_lightgbm_with_missing_values_match_onnxruntime(classes):
    onnxmltools = pytest.importorskip("onnxmltools")
    lightgbm = pytest.importorskip("lightgbm")
    import xgboost
    from onnxmltools.convert.common.data_types import FloatTensorType

    x, y = _classes(classes, seed=1)
    holes = x.copy()
    holes[::7, 2] = np.nan  # missing values take each node's learned default branch
    types = [("x", FloatTensorType([None, x.shape[1]]))]
    xgb = xgboost.XGBClassifier(n_estimators=5, max_depth=3).fit(holes, y)
    compare_with_onnxruntime(onnxmltools.convert_xgboost(xgb, initial_types=types), holes)
    lgb = lightgbm.LGBMClassifier(n_estimators=5, num_leaves=7, verbose=-1).fit(holes, y)
    compare_with_onnxruntime(onnxmltools.convert_lightgbm(lgb, initial_types=types, zipmap=False), holes)


def _stump_model(op: str, mode: str = "BRANCH_LEQ", features: int = 3, **attrs) -> onnx.ModelProto:
    """Two trees of depth 2 over `features` float inputs (each node's true child first)."""
    nodes = dict(nodes_treeids=[0, 0, 0, 0, 0, 1, 1, 1], nodes_nodeids=[0, 1, 2, 3, 4, 0, 1, 2],
                 nodes_featureids=[0, 1, 0, 0, 0, 2, 0, 0], nodes_values=[0.0, 0.5, 0, 0, 0, -0.25, 0, 0],
                 nodes_modes=[mode, mode, "LEAF", "LEAF", "LEAF", mode, "LEAF", "LEAF"],
                 nodes_truenodeids=[1, 2, 0, 0, 0, 1, 0, 0], nodes_falsenodeids=[4, 3, 0, 0, 0, 2, 0, 0],
                 nodes_missing_value_tracks_true=[0, 1, 0, 0, 0, 1, 0, 0])
    nodes.update(attrs)
    outputs = ([helper.make_tensor_value_info("label", onnx.TensorProto.INT64, [None]),
                helper.make_tensor_value_info("scores", onnx.TensorProto.FLOAT, [None, None])]
               if op == "TreeEnsembleClassifier" else
               [helper.make_tensor_value_info("scores", onnx.TensorProto.FLOAT, [None, None])])
    node = helper.make_node(op, ["x"], [o.name for o in outputs], domain=ML, **nodes)
    graph = helper.make_graph([node], "trees", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT,
                                                                                [None, features])], outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)])
    model.ir_version = 8
    return model


def _probe_rows() -> np.ndarray:
    rng = np.random.default_rng(3)
    x = rng.choice([-1.0, -0.25, 0.0, 0.5, 1.0], size=(40, 3)).astype(np.float32)  # hits every threshold exactly
    x[::5, 1] = np.nan
    x[::6, 2] = np.nan
    return x


@pytest.mark.parametrize("mode", ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"])
@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_regressor_modes_and_aggregates(mode, aggregate):
    model = _stump_model("TreeEnsembleRegressor", mode, n_targets=2, aggregate_function=aggregate,
                         target_treeids=[0, 0, 0, 1, 1, 0, 0, 0, 1, 1], target_nodeids=[2, 3, 4, 1, 2, 2, 3, 4, 1, 2],
                         target_ids=[0, 0, 0, 0, 0, 1, 1, 1, 1, 1],
                         target_weights=[1.0, -2.0, 3.5, 0.25, -0.75, 2.0, 1.0, -1.0, 0.5, 4.0],
                         base_values=[0.5, -1.0])
    compare_with_onnxruntime(model, _probe_rows())


# Binary classifiers: which classes the leaves score, the base values and the weights' signs pick ONNX
# Runtime's rule for the label and the two scores.
@pytest.mark.parametrize("class_ids,weights,base,transform", [
    ([0, 0, 0, 0, 0], [0.2, 0.9, 0.6, 0.1, 0.7], None, "NONE"),               # one class, probabilities
    ([0, 0, 0, 0, 0], [-1.5, 2.0, 0.3, -0.2, 1.0], [0.25], "LOGISTIC"),      # one class, margins (GBDT)
    ([0, 0, 0, 0, 0], [-1.5, 2.0, 0.3, -0.2, 1.0], None, "NONE"),
    ([1, 1, 1, 1, 1], [0.2, 0.9, 0.6, 0.1, 0.7], [0.1, 0.3], "NONE"),
    ([0, 0, 0, 0, 0], [-1.5, 2.0, 0.3, -0.2, 1.0], [0.1, 0.3], "LOGISTIC"),
    ([1, 1, 1, 1, 1], [0.2, 0.9, 0.6, 0.1, 0.7], None, "NONE"),
    ([1, 1, 1, 1, 1], [-1.5, 2.0, 0.3, -0.2, 1.0], [0.1], "LOGISTIC"),
], ids=["probability", "margin_base", "margin", "class1_two_bases", "class0_two_bases", "class1", "class1_base"])
def test_binary_classifier_rules(class_ids, weights, base, transform):
    extra = {"base_values": base} if base is not None else {}
    model = _stump_model("TreeEnsembleClassifier", classlabels_int64s=[3, 7], post_transform=transform,
                         class_treeids=[0, 0, 0, 1, 1], class_nodeids=[2, 3, 4, 1, 2], class_ids=class_ids,
                         class_weights=weights, **extra)
    compare_with_onnxruntime(model, _probe_rows())


def test_binary_classifier_scoring_both_classes():
    model = _stump_model("TreeEnsembleClassifier", classlabels_int64s=[0, 1], post_transform="SOFTMAX",
                         class_treeids=[0, 0, 0, 1, 1] * 2, class_nodeids=[2, 3, 4, 1, 2] * 2,
                         class_ids=[0] * 5 + [1] * 5, class_weights=[0.2, 0.9, 0.6, 0.1, 0.7, 0.8, 0.1, 0.4, 0.9, 0.3])
    compare_with_onnxruntime(model, _probe_rows())


def test_multiclass_skips_classes_no_tree_scores():
    model = _stump_model("TreeEnsembleClassifier", classlabels_int64s=[10, 20, 30], post_transform="SOFTMAX",
                         class_treeids=[0, 0, 0, 1, 1], class_nodeids=[2, 3, 4, 1, 2], class_ids=[0, 0, 0, 2, 2],
                         class_weights=[-0.5, -1.0, -2.0, -0.1, -0.3])
    compare_with_onnxruntime(model, _probe_rows())


def test_zipmap_is_refused_with_the_export_fix():
    x, y = _classes(3)
    model = skl2onnx.to_onnx(RandomForestClassifier(2, max_depth=2, random_state=0).fit(x, y), x[:1])
    with pytest.raises(UnsupportedOpError, match=r"ZipMap.*zipmap': False"):
        import_onnx(model, {"X": x.shape})


@pytest.mark.parametrize("modes", [("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GT"), ("BRANCH_EQ", "BRANCH_GTE", "BRANCH_NEQ"),
                                   ("BRANCH_NEQ", "BRANCH_EQ", "BRANCH_LT")], ids=["orders", "equality", "neq_first"])
def test_mixed_branch_modes_match_onnxruntime(modes):
    """Modes mixed in one ensemble are rewritten to BRANCH_LEQ nodes (x == t as two of them)."""
    model = _stump_model("TreeEnsembleClassifier", classlabels_int64s=[3, 7, 9], post_transform="SOFTMAX",
                         class_treeids=[0, 0, 0, 0, 0, 0, 1, 1], class_nodeids=[2, 3, 4, 2, 3, 4, 1, 2],
                         class_ids=[0, 0, 0, 2, 2, 2, 1, 1],
                         class_weights=[0.2, 0.9, 0.6, 0.1, 0.7, -0.4, 0.3, 0.5],
                         nodes_modes=[modes[0], modes[1], "LEAF", "LEAF", "LEAF", modes[2], "LEAF", "LEAF"])
    compare_with_onnxruntime(model, _probe_rows())
