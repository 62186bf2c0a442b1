"""ai.onnx.ml support vector machines from skl2onnx (SVC one-vs-one with three classes, SVR) for every kernel
type, imported and evaluated against ONNX Runtime: labels exactly, decision values within 1e-4."""
from __future__ import annotations

import numpy as np
import pytest

from .test_frontend_ml_trees import compare_with_onnxruntime

sklearn = pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")
from sklearn.datasets import make_classification, make_regression  # noqa: E402
from sklearn.svm import SVC, SVR  # noqa: E402

KERNELS = ["rbf", "linear", "poly", "sigmoid"]


@pytest.mark.parametrize("kernel", KERNELS)
def test_svc_three_classes(kernel):
    x, y = make_classification(90, 4, n_informative=3, n_redundant=0, n_classes=3, random_state=0)
    x = x.astype(np.float32)
    model = skl2onnx.to_onnx(SVC(kernel=kernel, degree=2).fit(x, y), x[:1], options={"zipmap": False})
    compare_with_onnxruntime(model, x, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kernel", KERNELS)
def test_svr(kernel):
    x, y = make_regression(60, 3, random_state=0)
    x = x.astype(np.float32)
    compare_with_onnxruntime(skl2onnx.to_onnx(SVR(kernel=kernel, degree=2).fit(x, y / 50), x[:1]), x,
                             rtol=1e-4, atol=1e-4)
