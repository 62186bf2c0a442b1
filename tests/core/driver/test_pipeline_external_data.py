"""Models with external data through core.compile (issue 34, item 4): the data files beside the model are read
wherever the working directory is, validation runs ONNX Runtime on them, and the artifact matches it."""
from __future__ import annotations

import onnx
import pytest

import core
from core.errors import InvalidModelError
from tests.conftest import assert_artifact_matches_onnxruntime
from tests.external_data_models import save_external_mlp


def test_compile_reads_the_data_beside_the_model_from_any_working_directory(tmp_path, monkeypatch):
    path = save_external_mlp(tmp_path / "model", location="weights/all.bin")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # ONNX Runtime resolved data files here before
    artifact = core.compile(path, target="x86-64-v3")
    validation = artifact.report["validation"]
    assert validation["passed"] and validation["reference"] == "onnxruntime" and validation["max_abs_err"] < 1e-4
    assert artifact.report["latency_ms"]["onnxruntime"] > 0
    saved = artifact.save(tmp_path / "mlp.tar.gz")
    assert_artifact_matches_onnxruntime(saved, path, seed=3)


def test_a_loaded_proto_compiles_too(tmp_path):
    """onnx.load reads the data in: the proto carries its weights and needs no folder."""
    path = save_external_mlp(tmp_path)
    artifact = core.compile(onnx.load(str(path)), target="x86-64-v3")
    assert artifact.report["validation"]["passed"]
    assert_artifact_matches_onnxruntime(artifact.save(tmp_path / "a.tar.gz"), path, seed=4)


@pytest.mark.parametrize("location", ["../outside.data", "/etc/passwd", "sub/../../outside.data"])
def test_a_location_that_escapes_the_folder_is_refused(tmp_path, location):
    path = save_external_mlp(tmp_path / "model")
    model = onnx.load(str(path), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    onnx.save(model, str(path))
    with pytest.raises(InvalidModelError, match="escapes the model's folder"):
        core.compile(path, target="x86-64-v3")
