"""ai.onnx.ml linear models and feature transforms imported and evaluated against ONNX Runtime: skl2onnx
logistic and linear regression and a scaler + one-hot encoder + classifier pipeline, and hand-built nodes
for what skl2onnx does not emit (one-score classifiers, Normalizer norms, Imputer, LabelEncoder...)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from core.errors import KilnError, UnsupportedOpError
from core.frontend import import_onnx

from .test_frontend_ml_trees import ML, compare_with_onnxruntime

sklearn = pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")
from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.datasets import make_classification, make_regression  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import OneHotEncoder, StandardScaler  # noqa: E402


@pytest.mark.parametrize("classes", [2, 3])
def test_logistic_regression(classes):
    x, y = make_classification(120, 5, n_informative=3, n_redundant=0, n_classes=classes, random_state=0)
    x = x.astype(np.float32)
    compare_with_onnxruntime(skl2onnx.to_onnx(LogisticRegression().fit(x, y), x[:1], options={"zipmap": False}), x)


def test_linear_regression():
    x, y = make_regression(80, 4, n_targets=2, random_state=0)
    x = x.astype(np.float32)
    compare_with_onnxruntime(skl2onnx.to_onnx(LinearRegression().fit(x, y), x[:1]), x, atol=1e-3)


def scaler_one_hot_pipeline():
    """StandardScaler on four columns, OneHotEncoder on a fifth (categories 0..2), then logistic regression."""
    rng = np.random.default_rng(0)
    x, y = make_classification(150, 4, random_state=0)
    x = np.concatenate([x, rng.integers(0, 3, (150, 1))], axis=1).astype(np.float32)
    columns = ColumnTransformer([("num", StandardScaler(), [0, 1, 2, 3]),
                                 ("cat", OneHotEncoder(handle_unknown="ignore"), [4])])
    pipeline = make_pipeline(columns, LogisticRegression()).fit(x, y)
    return skl2onnx.to_onnx(pipeline, x[:1], options={"zipmap": False}), x


def test_scaler_one_hot_classifier_pipeline():
    model, x = scaler_one_hot_pipeline()
    x[::11, 4] = 5.0  # a category never seen in training: all zeros
    compare_with_onnxruntime(model, x)


def _node_model(op: str, inputs: dict, outputs: dict, **attrs) -> onnx.ModelProto:
    """One ai.onnx.ml node; inputs/outputs: name -> (elem type, shape)."""
    node = helper.make_node(op, list(inputs), list(outputs), domain=ML, **attrs)
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
                              [helper.make_tensor_value_info(n, t, s) for n, (t, s) in outputs.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)])
    model.ir_version = 8
    return model


F, I64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64
ROWS = np.random.default_rng(5).standard_normal((12, 3)).astype(np.float32)


@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX"])
@pytest.mark.parametrize("labels", [[0, 1], [4, 9]])
def test_linear_classifier_with_one_score(transform, labels):
    model = _node_model("LinearClassifier", {"x": (F, [None, 3])}, {"l": (I64, [None]), "s": (F, [None, 2])},
                        coefficients=[1.0, -1.0, 0.5], intercepts=[0.1], classlabels_ints=labels,
                        post_transform=transform)
    compare_with_onnxruntime(model, ROWS)


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer(norm):
    model = _node_model("Normalizer", {"x": (F, [None, 3])}, {"y": (F, [None, 3])}, norm=norm)
    compare_with_onnxruntime(model, np.abs(ROWS) + 0.1)


@pytest.mark.parametrize("op,attrs", [
    ("Binarizer", dict(threshold=0.2)),
    ("Scaler", dict(offset=[0.5, 0.0, -1.0], scale=[2.0, -1.0, 0.25])),
    ("Scaler", dict(offset=[0.5], scale=[2.0])),
    ("Imputer", dict(replaced_value_float=float("nan"), imputed_value_floats=[1.0, 2.0, 3.0])),
    ("Imputer", dict(replaced_value_float=0.0, imputed_value_floats=[-7.0])),
], ids=["binarizer", "scaler", "scaler_one_value", "imputer_nan", "imputer_value"])
def test_elementwise_transforms(op, attrs):
    x = ROWS.copy()
    x[1::5, 2] = 0.0
    if op == "Imputer":
        x[::4, 1] = np.nan
    compare_with_onnxruntime(_node_model(op, {"x": (F, [None, 3])}, {"y": (F, [None, 3])}, **attrs), x)


def test_label_encoder_and_array_feature_extractor():
    x = np.array([[3, 1, 8], [5, 3, 0]], np.int64)
    compare_with_onnxruntime(_node_model("LabelEncoder", {"x": (I64, [None, 3])}, {"y": (I64, [None, 3])},
                         keys_int64s=[1, 3, 5], values_int64s=[10, 30, 50], default_int64=-2), x)
    indices = helper.make_tensor("i", I64, [2], [2, 0])
    model = _node_model("ArrayFeatureExtractor", {"x": (F, [None, 3]), "i": (I64, [2])}, {"y": (F, [None, 2])})
    model.graph.initializer.append(indices)
    compare_with_onnxruntime(model, ROWS)


def test_category_mapper_is_refused_as_strings():
    """Kiln's tensors are numeric, so neither side of a CategoryMapper can be represented."""
    attrs = dict(cats_strings=["a", "b"], cats_int64s=[1, 2])
    to_strings = _node_model("CategoryMapper", {"x": (I64, [None])}, {"y": (onnx.TensorProto.STRING, [None])},
                             **attrs)
    with pytest.raises(UnsupportedOpError, match=r"CategoryMapper.*strings.*LabelEncoder"):
        import_onnx(to_strings, {"x": (4,)})
    to_ints = _node_model("CategoryMapper", {"x": (onnx.TensorProto.STRING, [None])}, {"y": (I64, [None])}, **attrs)
    with pytest.raises(KilnError, match="input 'x': element type STRING is not supported"):
        import_onnx(to_ints, {"x": (4,)})
