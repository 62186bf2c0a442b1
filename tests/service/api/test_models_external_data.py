"""POST /models with a model and its external data files as a .zip or .tar(.gz) of its folder (issue 34, item 4):
kept with the data beside it, compiled by the worker and matching ONNX Runtime; escaping paths, links and bombs 422."""
from __future__ import annotations

import pytest

from service.api.model_archive import MAX_MEMBERS
from tests.conftest import assert_artifact_matches_onnxruntime
from tests.external_data_models import folder_files, save_external_mlp, tarred, zipped
from workers.compile_job import run_compile_job


def _leftovers(api) -> list:
    return list(api.settings.tmp_dir.iterdir())


@pytest.mark.parametrize("pack,name", [(zipped, "mlp.zip"), (tarred, "mlp.tar.gz"),
                                       (lambda files: tarred(files, mode="w"), "mlp.tar")])
def test_an_archive_of_the_folder_uploads_compiles_and_matches_onnxruntime(api, tmp_path, pack, name):
    path = save_external_mlp(tmp_path / "model", location="data/mlp.bin")
    headers = api.auth()
    response = api.upload(headers, pack(folder_files(path, prefix="exported/")), name=name)
    assert response.status_code == 201, response.text
    model = response.json()
    assert model["inputs"] == [{"name": "x", "shape": [4, 32], "dtype": "float32"}] and model["filename"] == name
    kept = api.settings.models_dir / model["id"]
    assert sorted(p.relative_to(kept).as_posix() for p in kept.rglob("*") if p.is_file()) == \
        ["data/mlp.bin", "model.onnx"]
    assert _leftovers(api) == []

    job = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"], "target": "x86-64-v3"})
    assert job.status_code == 201, job.text
    assert run_compile_job(job.json()["id"], api.settings, api.app.state.db, worker="test") == "succeeded"
    artifact = api.client.get(f"/api/v1/jobs/{job.json()['id']}/artifact", headers=headers)
    (tmp_path / "artifact.tar.gz").write_bytes(artifact.content)
    assert_artifact_matches_onnxruntime(tmp_path / "artifact.tar.gz", path, seed=2)
    report = api.client.get(f"/api/v1/jobs/{job.json()['id']}/report", headers=headers).json()
    assert report["validation"]["passed"] and report["validation"]["reference"] == "onnxruntime"


def _refused(api, data: bytes, name: str, needle: str) -> None:
    response = api.upload(api.auth(), data, name=name)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert needle in detail["message"] and detail["code"]
    assert list(api.settings.models_dir.iterdir()) == [] and _leftovers(api) == []


def test_a_single_file_with_external_data_says_to_upload_its_folder(api, tmp_path):
    path = save_external_mlp(tmp_path / "model")
    _refused(api, path.read_bytes(), "mlp.onnx", "as a .zip or .tar(.gz) of its folder")


@pytest.mark.parametrize("member", ["../evil.onnx.data", "/abs/evil.data", "a/../../evil.data", "C:/evil.data"])
def test_member_paths_that_leave_the_archive_are_refused(api, tmp_path, member):
    files = folder_files(save_external_mlp(tmp_path / "model"))
    for pack, name in ((zipped, "m.zip"), (tarred, "m.tar.gz")):
        _refused(api, pack({**files, member: b"x"}), name, "not a plain relative path")


def test_links_are_refused(api, tmp_path):
    import io
    import stat
    import zipfile

    files = folder_files(save_external_mlp(tmp_path / "model"))
    del files["mlp.onnx.data"]
    _refused(api, tarred(files, links={"mlp.onnx.data": "/etc/passwd"}), "m.tar.gz", "a link or a special file")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("mlp.onnx", files["mlp.onnx"])
        link = zipfile.ZipInfo("mlp.onnx.data")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(link, "/etc/passwd")
    _refused(api, buffer.getvalue(), "m.zip", "a link or a special file")


def test_a_data_location_escaping_the_folder_is_refused(api, tmp_path):
    import onnx

    path = save_external_mlp(tmp_path / "inner")
    model = onnx.load(str(path), load_external_data=False)
    for tensor in model.graph.initializer:
        tensor.external_data[0].value = "../mlp.onnx.data"
    onnx.save(model, str(path))
    files = {"inner/mlp.onnx": path.read_bytes(), "mlp.onnx.data": (tmp_path / "inner" / "mlp.onnx.data").read_bytes()}
    _refused(api, zipped(files), "m.zip", "escapes the model's folder")


def test_missing_data_file_is_refused(api, tmp_path):
    files = folder_files(save_external_mlp(tmp_path / "model"))
    del files["mlp.onnx.data"]
    _refused(api, zipped(files), "m.zip", "not an ONNX model")


@pytest.mark.parametrize("files,needle", [({"a.onnx": b"1", "b.onnx": b"2"}, "exactly one .onnx model"),
                                          ({"readme.txt": b"hi"}, "exactly one .onnx model (found none)")])
def test_archives_without_exactly_one_model_are_refused(api, files, needle):
    _refused(api, zipped(files), "m.zip", needle)


def test_too_many_members_and_too_many_bytes_are_refused(api, tmp_path):
    files = folder_files(save_external_mlp(tmp_path / "model"))
    _refused(api, zipped({**files, **{f"pad/{i}": b"" for i in range(MAX_MEMBERS)}}), "m.zip", "entries")
    bomb = zipped({**files, "zeros.bin": bytes(api.settings.max_upload_bytes)})  # compresses to a few kB
    _refused(api, bomb, "m.zip", "over the upload limit")
