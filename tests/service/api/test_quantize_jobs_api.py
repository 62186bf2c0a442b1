"""int8 jobs over HTTP: calibration samples uploaded for a model (checked before they are kept), the job's
precision and quantization options refused clearly when wrong, and a job that quantizes, compiles, validates
against ONNX Runtime and reports the accuracy cost (JSON and HTML)."""
from __future__ import annotations

import io

import numpy as np
import pytest

from core.driver.reference import EXACT_REFERENCE
from service.core import storage
from tests.core.quantize.models import INPUT, calibration_samples, small_cnn
from workers.compile_job import run_compile_job


def npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def upload_calibration(api, headers, model_id, data: bytes):
    return api.client.post(f"/api/v1/models/{model_id}/calibration", headers=headers,
                           files={"file": ("calibration.npz", data)})


@pytest.fixture
def cnn(api):
    headers = api.auth()
    model = api.upload(headers, small_cnn().SerializeToString(), "cnn.onnx").json()
    return headers, model["id"]


def test_an_int8_job_quantizes_compiles_validates_and_reports_the_accuracy_cost(api, cnn):
    headers, model_id = cnn
    answer = upload_calibration(api, headers, model_id, npz(**{INPUT: calibration_samples(10)}))
    assert answer.status_code == 201, answer.text
    assert answer.json()["samples"] == 10
    job = api.client.post("/api/v1/jobs", headers=headers, json={
        "model_id": model_id, "precision": "int8",
        "quantization": {"calibration_id": answer.json()["id"], "per_channel": True, "keep_float": ["fc"],
                         "max_error": 0.5}})
    assert job.status_code == 201, job.text
    job_id = job.json()["id"]
    assert (storage.job_dir(api.settings, job_id) / storage.JOB_CALIBRATION).is_file()  # the job's own copy
    assert run_compile_job(job_id, api.settings, api.app.state.db, worker="test") == "succeeded"
    report = api.client.get(f"/api/v1/jobs/{job_id}/report", headers=headers).json()
    q = report["quantization"]
    assert q["per_channel"] and q["keep_float"] == ["fc"] and q["calibration"] == {"samples": 8, "held_back": 2}
    assert q["layers"]["quantized"] == 2 and q["budget_met"] is True
    (out,) = q["accuracy"]["outputs"]
    assert 0 < out["rel_err"] < 0.5 and out["top1_positions"] == 2
    assert q["accuracy"]["measured_on"] == "kiln artifact"  # what the user deploys, not ORT's int8 session
    assert report["validation"]["passed"]  # Kiln's build of the QDQ model against the exact integer reference
    assert report["validation"]["reference"] == EXACT_REFERENCE
    uploaded = api.client.get(f"/api/v1/models/{model_id}", headers=headers).json()
    assert report["model"]["sha256"] != uploaded["sha256"]  # what was compiled is the QDQ model, not the upload
    page = api.client.get(f"/api/v1/jobs/{job_id}/report?format=html", headers=headers).text
    assert 'id="quantization"' in page and "Left in float32: fc by request" in page


@pytest.mark.parametrize("data, needle", [
    (npz(), "calibration data the upload is empty"),
    (npz(**{INPUT: calibration_samples(3).astype(np.float64)}), "input 'image' is float64, the model takes float32"),
    (npz(pixels=calibration_samples(3)), "missing input(s) 'image'"),
    (npz(**{INPUT: calibration_samples(1)}), "holds 1 sample; at least 2 are needed"),
])
def test_bad_calibration_is_refused_and_nothing_is_kept(api, cnn, data, needle):
    headers, model_id = cnn
    answer = upload_calibration(api, headers, model_id, data)
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"]
    assert needle in detail["message"] and detail["code"] == "bad_calibration"
    kept = storage.calibration_path(api.settings, model_id, "x").parent
    assert not (kept.exists() and any(kept.iterdir())) and not list(api.settings.tmp_dir.glob("upload-*"))


def test_job_options_are_refused_with_one_message(api, cnn):
    headers, model_id = cnn
    calibration_id = upload_calibration(api, headers, model_id, npz(**{INPUT: calibration_samples(4)})).json()["id"]

    def create(**body):
        answer = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model_id, **body})
        assert answer.status_code == 422, answer.text
        return str(answer.json()["detail"])

    assert "precision int8 needs quantization.calibration_id" in create(precision="int8")
    assert "quantization is for precision int8" in create(quantization={"calibration_id": calibration_id})
    assert "no such calibration samples" in create(precision="int8", quantization={"calibration_id": "0" * 32})
    assert "names no node of the model: 'conv9'" in create(
        precision="int8", quantization={"calibration_id": calibration_id, "keep_float": ["conv9"]})
    assert "greater than 0" in create(precision="int8", quantization={"calibration_id": calibration_id, "max_error": 0})
    assert api.queued == []


def test_an_already_quantized_model_is_refused_for_int8(api, cnn, tmp_path):
    from core.quantize import QuantizeOptions, quantize_model
    from tests.core.quantize.models import write_calibration, write_model

    headers, _ = cnn
    qdq = quantize_model(write_model(tmp_path), write_calibration(tmp_path), QuantizeOptions(sensitivity_layers=0)).model
    model_id = api.upload(headers, qdq, "cnn_int8.onnx").json()["id"]
    calibration_id = upload_calibration(api, headers, model_id, npz(**{INPUT: calibration_samples(4)})).json()["id"]
    answer = api.client.post("/api/v1/jobs", headers=headers, json={
        "model_id": model_id, "precision": "int8", "quantization": {"calibration_id": calibration_id}})
    assert answer.status_code == 422 and "already quantized" in str(answer.json()["detail"]), answer.text
