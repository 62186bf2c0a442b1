"""The shared reference models import cleanly (no Shape/Constant ops left, bert's shape
subgraphs folded) and the reference interpreter matches ONNX Runtime on them."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from core.frontend import import_onnx
from core.graph.interpret import evaluate
from core.graph.ops import all_ops
from core.graph.passes import fold_constants

VISION = ["resnet18", "mobilenet_v2", "squeezenet1_1"]


def _model_path(models_dir, name):
    path = models_dir / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path} is missing")
    return path


def _feeds(name):
    rng = np.random.default_rng(7)
    if name == "bert_tiny":
        return {"input_ids": rng.integers(0, 1000, (1, 64)).astype(np.int64),
                "attention_mask": (rng.random((1, 64)) < 0.75).astype(np.int64)}
    return {"input": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}


@pytest.mark.parametrize("name", VISION + ["bert_tiny"])
def test_model_matches_onnxruntime(name, models_dir, ort_runner):
    path = _model_path(models_dir, name)
    graph = import_onnx(path)
    feeds = _feeds(name)
    ours = evaluate(graph, feeds)
    theirs = ort_runner(path, feeds)
    proto_outputs = [o.name for o in onnx.load(str(path), load_external_data=False).graph.output]
    assert list(ours) == proto_outputs
    for (output, got), expected in zip(ours.items(), theirs):
        assert got.shape == expected.shape and got.dtype == expected.dtype
        scale = float(np.abs(expected).max())
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * max(scale, 1e-3), err_msg=output)


@pytest.mark.parametrize("name", VISION + ["bert_tiny"])
def test_imported_graph_is_static_and_folded(name, models_dir):
    graph = import_onnx(_model_path(models_dir, name))
    ops = {n.op for n in graph.nodes}
    assert ops <= set(all_ops())
    # Nothing left that only depends on constants: import already folded every shape subgraph.
    assert fold_constants(graph).nodes == graph.nodes
    assert not ops & {"Shape", "Constant", "ConstantOfShape", "Identity", "Dropout", "Gemm", "Flatten"}


def test_bert_shape_subgraphs_vanish(models_dir):
    graph = import_onnx(_model_path(models_dir, "bert_tiny"), input_shapes={"input_ids": (1, 64)})
    ops = [n.op for n in graph.nodes]
    assert "Expand" not in ops and "Equal" not in ops and "Concat" not in ops
    for node in graph.nodes:
        if node.op == "Reshape":
            assert all(d > 0 for d in node.attr("shape"))
    assert ops.count("LayerNormalization") == 5 and ops.count("Softmax") == 2 and ops.count("MatMul") == 16


def test_vision_models_use_fused_friendly_ops(models_dir):
    graph = import_onnx(_model_path(models_dir, "resnet18"))
    ops = [n.op for n in graph.nodes]
    assert ops.count("Conv") == 20 and ops.count("MatMul") == 1 and ops[-1] == "Add"
    squeeze = import_onnx(_model_path(models_dir, "squeezenet1_1"))
    assert any(n.op == "MaxPool" and n.attr("ceil_mode") == 1 for n in squeeze.nodes)
