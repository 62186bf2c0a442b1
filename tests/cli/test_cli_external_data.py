"""`kiln compile model.onnx` (and `kiln run --compare model.onnx`) read the model's external data files beside it,
from any working directory."""
from __future__ import annotations

from tests.cli.test_cli import kiln
from tests.conftest import assert_artifact_matches_onnxruntime
from tests.external_data_models import save_external_mlp


def test_cli_compiles_a_model_with_external_data(tmp_path):
    path = save_external_mlp(tmp_path / "model")
    (tmp_path / "elsewhere").mkdir()
    run = kiln("compile", path, "-t", "x86-64-v3", "-o", tmp_path / "out.tar.gz", cwd=tmp_path / "elsewhere")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "validation: max abs error" in run.stdout + run.stderr
    assert_artifact_matches_onnxruntime(tmp_path / "out.tar.gz", path, seed=5)
    compared = kiln("run", tmp_path / "out.tar.gz", "--compare", path, cwd=tmp_path / "elsewhere")
    assert compared.returncode == 0 and ": ok" in compared.stdout, compared.stderr[-2000:]


def test_cli_refuses_a_location_outside_the_folder_in_one_line(tmp_path):
    import onnx

    path = save_external_mlp(tmp_path / "model")
    model = onnx.load(str(path), load_external_data=False)
    model.graph.initializer[0].external_data[0].value = "../../secret.data"
    assert model.graph.initializer[0].external_data[0].key == "location"
    onnx.save(model, str(path))
    run = kiln("compile", path, "-t", "x86-64-v3", "-o", tmp_path / "out.tar.gz")
    assert run.returncode != 0 and run.stderr.strip().count("\n") == 0
    assert "escapes the model's folder" in run.stderr and not (tmp_path / "out.tar.gz").exists()
