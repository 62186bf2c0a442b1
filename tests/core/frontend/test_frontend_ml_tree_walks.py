"""Both tree walks (branch-free and branchy, core/kernels/tree_ensemble.py) compiled end to end for small skl2onnx
forests and boosting models: labels equal ONNX Runtime's, probabilities within 1e-5, one and several rows."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import core
from core.kernels import tree_ensemble
from core.kernels.tree_ensemble import BRANCH_FREE, BRANCHY, TreeLayout

sklearn = pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")
from sklearn.datasets import make_classification  # noqa: E402
from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier  # noqa: E402


def _random_forest():
    x, y = make_classification(200, 6, n_informative=4, n_classes=3, random_state=10)
    model = RandomForestClassifier(12, max_depth=6, random_state=0).fit(x.astype(np.float32), y)
    return model, x.astype(np.float32)


def _gradient_boosting():
    x, y = make_classification(200, 6, n_informative=4, random_state=11)
    model = GradientBoostingClassifier(n_estimators=20, max_depth=3, random_state=0).fit(x.astype(np.float32), y)
    return model, x.astype(np.float32)


LAYOUTS = {  # rows per block, trees per step, chunks: partial row blocks and tree chunks for 37 rows
    "branch_free": TreeLayout(4, 4, 2, BRANCH_FREE),
    "branchy": TreeLayout(4, 1, 2, BRANCHY),
    "branchy_per_row": TreeLayout(1, 1, 1, BRANCHY),
}


@pytest.mark.parametrize("walk", list(LAYOUTS))
@pytest.mark.parametrize("build", [_random_forest, _gradient_boosting], ids=["random_forest", "gradient_boosting"])
@pytest.mark.parametrize("rows", [1, 37])
def test_walk_matches_onnxruntime(build, walk, rows, monkeypatch):
    estimator, x = build()
    x = x[:rows].copy()
    model = skl2onnx.to_onnx(estimator, x[:1], options={"zipmap": False})
    monkeypatch.setattr(tree_ensemble, "tree_layout", lambda rows, trees: LAYOUTS[walk])
    artifact = core.compile(model, input_shapes={"X": x.shape}, benchmark=False, validate=False)
    module = artifact.load()
    try:
        got = module.run({"X": x})
    finally:
        module.close()
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    labels, probabilities = session.run(None, {"X": x})
    np.testing.assert_array_equal(np.asarray(got["label"]).reshape(labels.shape), labels)
    np.testing.assert_allclose(np.asarray(got["probabilities"]), probabilities, rtol=1e-5, atol=1e-5)
