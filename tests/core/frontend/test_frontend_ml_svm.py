"""ai.onnx.ml support vector machines from skl2onnx (SVC one-vs-one with two and three classes, with and without
probability estimates, SVR) for every kernel type, and hand-built two-class and liblinear-mode SVMClassifiers,
imported and evaluated against ONNX Runtime: labels exactly, decision values within 1e-4 (three classes, SVR) or
1e-5, probabilities within 1e-5."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from .test_frontend_ml_trees import ML, compare_with_onnxruntime

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


@pytest.mark.parametrize("classes", [2, 3, 5])
@pytest.mark.parametrize("kernel", ["rbf", "linear"])
def test_svc_probabilities(kernel, classes):
    """SVC(probability=True): Platt's sigmoid per class pair, coupled into class probabilities by libsvm's
    iteration (ONNX Runtime's arithmetic; rows stop after different iteration counts)."""
    x, y = make_classification(150, 5, n_informative=4, n_redundant=0, n_classes=classes, random_state=classes)
    x = x.astype(np.float32)
    model = skl2onnx.to_onnx(SVC(kernel=kernel, probability=True, random_state=0).fit(x, y), x[:1],
                             options={"zipmap": False})
    assert any(a.name == "prob_a" for a in model.graph.node[-1].attribute) or \
        any(a.name == "prob_a" for n in model.graph.node for a in n.attribute)
    compare_with_onnxruntime(model, x, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel", KERNELS)
def test_svr(kernel):
    x, y = make_regression(60, 3, random_state=0)
    x = x.astype(np.float32)
    compare_with_onnxruntime(skl2onnx.to_onnx(SVR(kernel=kernel, degree=2).fit(x, y / 50), x[:1]), x,
                             rtol=1e-4, atol=1e-4)


def _svm_model(labels: list[int], transform: str, **attrs):
    """One SVMClassifier node over 3 float features, both outputs."""
    node = helper.make_node("SVMClassifier", ["x"], ["label", "scores"], domain=ML, classlabels_ints=labels,
                            post_transform=transform, **attrs)
    graph = helper.make_graph([node], "svm", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [None, 3])],
                              [helper.make_tensor_value_info("label", onnx.TensorProto.INT64, [None]),
                               helper.make_tensor_value_info("scores", onnx.TensorProto.FLOAT, [None, None])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("kernel", KERNELS)
def test_svc_two_classes(kernel):
    x, y = make_classification(80, 4, n_informative=3, n_redundant=0, random_state=1)
    x = x.astype(np.float32)
    model = skl2onnx.to_onnx(SVC(kernel=kernel, degree=2).fit(x, y), x[:1], options={"zipmap": False})
    compare_with_onnxruntime(model, x, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_two_class_svm_post_transforms(transform):
    """ONNX Runtime's two-class scores: [-d, d], their LOGISTIC, and [1 - d, d] for SOFTMAX."""
    rng = np.random.default_rng(2)
    vectors = rng.standard_normal((5, 3)).astype(np.float32)
    model = _svm_model([4, 9], transform, vectors_per_class=[2, 3], support_vectors=vectors.ravel().tolist(),
                       coefficients=[0.7, -0.4, 0.9, -0.3, -0.9], rho=[0.1], kernel_type="RBF",
                       kernel_params=[0.5, 0.0, 3.0])
    compare_with_onnxruntime(model, rng.standard_normal((40, 3)).astype(np.float32), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("labels,coefficients", [
    ([3, 5], [0.5, -1.0, 0.25, -0.5, 1.0, 0.75]),        # mixed signs: the second label when the top score > 0
    ([3, 5], [0.5, 0.1, 0.25, 0.2, 0.3, 0.05]),          # all positive: when the top score >= 0.5
    ([1, 2, 7], [0.5, -1.0, 0.25, -0.5, 1.0, 0.75, 0.2, 0.1, -0.3]),
], ids=["two_mixed", "two_positive", "three"])
@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_linear_mode_svm(labels, coefficients, transform):
    """liblinear's mode (no support vectors): one linear score per class."""
    model = _svm_model(labels, transform, coefficients=coefficients, rho=[-0.2], kernel_type="LINEAR",
                       kernel_params=[0.0, 0.0, 0.0])
    x = np.random.default_rng(3).standard_normal((40, 3)).astype(np.float32)
    compare_with_onnxruntime(model, x, rtol=1e-5, atol=1e-5)
