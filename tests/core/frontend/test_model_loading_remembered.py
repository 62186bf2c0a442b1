"""loads_remembered (kiln compile's pre-flight, then its import): a model file is read and checked once, each load
gets its own copy, a changed file is read again, and outside the block every load reads the file."""
from __future__ import annotations

import os

import onnx
import pytest

from core.errors import InvalidModelError
from core.frontend import model_loading
from core.frontend.model_loading import load_model, loads_remembered
from tests.conftest import tiny_model


@pytest.fixture
def checks(monkeypatch):
    """How often the ONNX checker ran."""
    seen = []
    real = model_loading._check
    monkeypatch.setattr(model_loading, "_check", lambda source: (seen.append(source), real(source))[1])
    return seen


def test_a_model_file_is_checked_once_and_each_load_gets_its_own_copy(tmp_path, checks):
    path = tmp_path / "tiny.onnx"
    path.write_bytes(tiny_model(seed=1))
    with loads_remembered():
        first, second = load_model(path), load_model(str(path))
        assert len(checks) == 1
        assert first.SerializeToString() == second.SerializeToString() == load_model(path).SerializeToString()
        first.graph.node[0].name = "renamed"  # the quantizer names nodes: the next load must not see it
        assert load_model(path).graph.node[0].name != "renamed"
        assert len(checks) == 1
        path.write_bytes(tiny_model(seed=2))
        os.utime(path, ns=(1, 1))  # a changed file (size equal, time not): read again
        changed = load_model(path)
        assert len(checks) == 2
        assert onnx.numpy_helper.to_array(changed.graph.initializer[0]).tolist() != \
            onnx.numpy_helper.to_array(first.graph.initializer[0]).tolist()
    load_model(path)
    assert len(checks) == 3  # outside the block: read and checked again


def test_a_bad_file_is_refused_every_time_not_remembered(tmp_path, checks):
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"not a model")
    with loads_remembered():
        for _ in range(2):
            with pytest.raises(InvalidModelError, match="not an ONNX model"):
                load_model(path)
