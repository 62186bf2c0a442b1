"""Classic-ML models compiled end to end (core.compile: native tree walks and graph ops, validation against
ONNX Runtime) and run from the saved artifact on real rows: labels equal ONNX Runtime's, probabilities within
1e-5 (relative to the scores' scale for regressors)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import core
from core.runtime import load

sklearn = pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")
onnxmltools = pytest.importorskip("onnxmltools")
lightgbm = pytest.importorskip("lightgbm")
from onnxmltools.convert.common.data_types import FloatTensorType  # noqa: E402
from sklearn.datasets import make_classification, make_regression  # noqa: E402
from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier  # noqa: E402

from .test_frontend_ml_linear import scaler_one_hot_pipeline  # noqa: E402


def _random_forest():
    x, y = make_classification(300, 8, n_informative=5, n_classes=3, random_state=0)
    x = x.astype(np.float32)
    model = RandomForestClassifier(20, max_depth=6, random_state=0).fit(x, y)
    return skl2onnx.to_onnx(model, x[:1], options={"zipmap": False}), x


def _gradient_boosting():
    x, y = make_classification(300, 8, n_informative=5, random_state=1)
    x = x.astype(np.float32)
    model = GradientBoostingClassifier(n_estimators=30, max_depth=3, random_state=0).fit(x, y)
    return skl2onnx.to_onnx(model, x[:1], options={"zipmap": False}), x


def _lightgbm():
    x, y = make_classification(300, 8, n_informative=5, n_classes=3, random_state=2)
    x = x.astype(np.float32)
    x[::9, 3] = np.nan
    model = lightgbm.LGBMClassifier(n_estimators=15, num_leaves=15, verbose=-1).fit(x, y)
    return onnxmltools.convert_lightgbm(model, initial_types=[("x", FloatTensorType([None, 8]))], zipmap=False), x


def _svc():
    from sklearn.svm import SVC

    x, y = make_classification(120, 5, n_informative=3, n_redundant=0, n_classes=3, random_state=4)
    x = x.astype(np.float32)
    return skl2onnx.to_onnx(SVC().fit(x, y), x[:1], options={"zipmap": False}), x


def _svc_probabilities():
    from sklearn.svm import SVC

    x, y = make_classification(120, 5, n_informative=4, n_redundant=0, n_classes=4, random_state=5)
    x = x.astype(np.float32)
    return skl2onnx.to_onnx(SVC(probability=True, random_state=0).fit(x, y), x[:1], options={"zipmap": False}), x


def _xgboost_regressor():
    import xgboost

    x, y = make_regression(300, 8, random_state=3)
    x = x.astype(np.float32)
    model = xgboost.XGBRegressor(n_estimators=25, max_depth=4).fit(x, y)
    return onnxmltools.convert_xgboost(model, initial_types=[("x", FloatTensorType([None, 8]))]), x


@pytest.mark.parametrize("build", [_random_forest, _gradient_boosting, _lightgbm, _xgboost_regressor,
                                   scaler_one_hot_pipeline, _svc, _svc_probabilities],
                         ids=["sklearn_random_forest", "sklearn_gradient_boosting", "lightgbm", "xgboost_regressor",
                              "scaler_one_hot_logistic_pipeline", "svc_rbf", "svc_probabilities"])
def test_compiled_model_matches_onnxruntime(build, tmp_path):
    model, x = build()
    name = model.graph.input[0].name
    artifact = core.compile(model, input_shapes={name: x.shape}, benchmark=False)  # validates against ORT itself
    if any(node.op_type.startswith("TreeEnsemble") for node in model.graph.node):
        assert "TreeEnsemble" in {op for kernel in artifact.report["kernels"] for op in kernel["ops"]}
    path = tmp_path / "model.tar.gz"
    artifact.save(path)
    got = load(path).run({name: x})
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for output, want in zip(session.get_outputs(), session.run(None, {name: x})):
        have = np.asarray(got[output.name]).reshape(want.shape)
        if want.dtype.kind in "iu":
            np.testing.assert_array_equal(have, want, err_msg=output.name)
        else:
            np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(want).max())),
                                       err_msg=output.name)
