"""BERT models passed through onnxruntime.transformers.optimizer (EmbedLayerNormalization, Attention,
SkipLayerNormalization, BiasGelu inside) compile with Kiln and match ONNX Runtime on the optimized model."""
from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnxruntime.transformers import optimizer

from core.onnx_backend.backend import KilnBackend

from .classic_bert import classic_bert
from .conftest import MODELS_DIR


def optimized(model_path, heads: int, hidden: int, out_path) -> onnx.ModelProto:
    """The model as the optimizer saves it (saving adds the com.microsoft opset import)."""
    optimizer.optimize_model(str(model_path), model_type="bert", num_heads=heads, hidden_size=hidden,
                             opt_level=0).save_model_to_file(str(out_path))
    return onnx.load(out_path)


def contrib_ops(model: onnx.ModelProto) -> collections.Counter:
    return collections.Counter(n.op_type for n in model.graph.node if n.domain == "com.microsoft")


def assert_compiled_matches_ort(model: onnx.ModelProto, feeds: dict, atol: float = 1e-4) -> None:
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = KilnBackend.prepare(model).run(feeds)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=atol)


def test_classic_bert_after_the_optimizer(tmp_path):
    path = tmp_path / "bert.onnx"
    onnx.save(classic_bert(), path)
    model = optimized(path, heads=2, hidden=32, out_path=tmp_path / "optimized.onnx")
    assert contrib_ops(model) == {"EmbedLayerNormalization": 1, "Attention": 2, "SkipLayerNormalization": 4,
                                  "BiasGelu": 2}
    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(0, 100, (1, 16)).astype(np.int64),
             "attention_mask": np.array([[1] * 12 + [0] * 4], np.int64),
             "token_type_ids": rng.integers(0, 2, (1, 16)).astype(np.int64)}
    assert_compiled_matches_ort(model, feeds)


@pytest.mark.slow
def test_shared_bert_tiny_after_the_optimizer(tmp_path):
    model = optimized(MODELS_DIR / "bert_tiny.onnx", heads=2, hidden=128, out_path=tmp_path / "optimized.onnx")
    assert contrib_ops(model) == {"SkipLayerNormalization": 4, "BiasGelu": 2}
    rng = np.random.default_rng(1)
    feeds = {"input_ids": rng.integers(0, 1000, (1, 64)).astype(np.int64),
             "attention_mask": np.array([[1] * 50 + [0] * 14], np.int64)}
    assert_compiled_matches_ort(model, feeds)
