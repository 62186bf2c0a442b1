"""What a careful user or an attacker sends (issue 36): .npz files that lie in their headers, NaN in a job's JSON,
an upload racing its model's deletion, uploads a killed server left half-received: a 4xx, and no file left behind."""
from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest

from service.api.app import create_app
from service.core import storage
from tests.core.quantize.models import small_cnn

ENDPOINTS = {"validation-inputs": "bad_validation_inputs", "calibration": "bad_calibration"}


def npz_of(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buf.getvalue()


def lying_npy(shape: tuple) -> bytes:
    """An .npy whose header declares `shape` of float32, followed by 16 bytes of data."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return buf.getvalue() + bytes(16)


def upload(api, headers, model_id: str, endpoint: str, data: bytes):
    return api.client.post(f"/api/v1/models/{model_id}/{endpoint}", headers=headers, files={"file": ("s.npz", data)})


@pytest.fixture
def cnn(api):
    headers = api.auth()
    model = api.upload(headers, small_cnn().SerializeToString())
    assert model.status_code == 201, model.text
    return headers, model.json()


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("members, needle", [
    ({"image.npy": lying_npy((10**11,))}, "declare more than"),       # numpy raised MemoryError: a 500
    ({"image.npy": b"not an array at all"}, "is not an .npy array"),   # np.load gave bytes: a 500
])
def test_npz_members_that_lie_are_422(api, cnn, endpoint, members, needle):
    headers, model = cnn
    answer = upload(api, headers, model["id"], endpoint, npz_of(members))
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"]["code"] == ENDPOINTS[endpoint] and needle in answer.json()["detail"]["message"]
    assert not (api.settings.models_dir / model["id"] / endpoint.split("-")[0]).exists()
    assert not list(api.settings.tmp_dir.glob("upload-*"))


@pytest.mark.parametrize("body", ['{"model_id": "m", "tuning": {"time_budget_s": NaN}}', '{"model_id": NaN}',
                                  '{"model_id": "m", "opt_level": Infinity}',
                                  '{"model_id": "m", "tuning": {"time_budget_s": Infinity}}',
                                  '{"model_id": "m", "baseline": {"job_id": "j", "max_error_growth": -Infinity}}'])
def test_non_finite_numbers_in_a_job_are_422_with_a_json_body(api, body):
    answer = api.client.post("/api/v1/jobs", headers={**api.auth(), "Content-Type": "application/json"}, content=body)
    assert answer.status_code == 422, answer.text
    detail = json.loads(answer.text)["detail"]  # strict JSON: the body could not be written before
    assert detail["code"] == "invalid_request" and detail["message"]
    assert api.queued == []


def test_inputs_uploaded_while_their_model_is_deleted_leave_no_file(api, cnn, monkeypatch):
    """The model's DELETE ran between the upload's check and its keep: the upload answered 201 and left a file in
    a folder of a model that no longer exists."""
    from service.api.routes import models as model_routes
    from service.core.tables import Model

    headers, model = cnn
    real_check = model_routes._check_validation_inputs

    def check_then_model_deleted(path, summary, limit):
        samples = real_check(path, summary, limit)
        with api.app.state.db.session() as db:  # what DELETE /models/{id} does, all of it
            db.query(Model).filter(Model.id == model["id"]).delete()
            db.commit()
        storage.remove_model(api.settings, model["id"])
        return samples

    monkeypatch.setattr(model_routes, "_check_validation_inputs", check_then_model_deleted)
    buf = io.BytesIO()
    np.savez(buf, image=np.zeros((2, 1, 3, 12, 12), np.float32))
    answer = upload(api, headers, model["id"], "validation-inputs", buf.getvalue())
    assert answer.status_code == 404, answer.text
    assert not (api.settings.models_dir / model["id"]).exists()
    assert not list(api.settings.tmp_dir.glob("upload-*"))


def test_uploads_a_killed_server_left_are_cleared_at_start(api):
    left = api.settings.tmp_dir / "upload-abc123"
    left.mkdir()
    (left / storage.MODEL_FILE).write_bytes(b"half a model")
    staging = api.settings.tmp_dir / "job-0123"  # a job's staging folder is its worker's to clear
    staging.mkdir()
    create_app(api.settings, enqueue=lambda job_id: None).state.db.dispose()
    assert not left.exists() and staging.exists()


def test_answers_carry_no_server_paths(api, cnn):
    """GET /models/{id}/jobs and the compare view answered options.validation_inputs and
    options.quantization.calibration as absolute paths under the data dir."""
    headers, model = cnn
    buf = io.BytesIO()
    np.savez(buf, image=np.zeros((3, 1, 3, 12, 12), np.float32))
    inputs = upload(api, headers, model["id"], "validation-inputs", buf.getvalue()).json()
    calibration = upload(api, headers, model["id"], "calibration", buf.getvalue()).json()
    jobs = [api.client.post("/api/v1/jobs", headers=headers, json=body).json()["id"] for body in (
        {"model_id": model["id"], "validation": {"inputs_id": inputs["id"]}},
        {"model_id": model["id"], "precision": "int8", "quantization": {"calibration_id": calibration["id"]}})]
    history = api.client.get(f"/api/v1/models/{model['id']}/jobs", headers=headers)
    compare = api.client.get(f"/api/v1/jobs/{jobs[0]}/compare/{jobs[1]}", headers=headers)
    assert history.status_code == compare.status_code == 200
    for answer in (history, compare):
        assert str(api.settings.data_dir.absolute()) not in answer.text and "/tmp" not in answer.text, answer.text
    options = [build["options"] for build in history.json()]
    assert options[0]["validation_inputs"] == storage.JOB_VALIDATION_INPUTS
    assert options[1]["quantization"]["calibration"] == storage.JOB_CALIBRATION
    assert compare.json()["b"]["options"]["quantization"]["calibration"] == storage.JOB_CALIBRATION
