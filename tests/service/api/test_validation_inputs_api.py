"""Validation options over HTTP: the inputs' .npz uploaded for a model (checked like a model upload), the job's
validation mode, tolerance and inputs passed through the worker to core.compile."""
from __future__ import annotations

import io
import json

import numpy as np
import pytest

from service.core import storage
from workers.compile_job import run_compile_job


def npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def upload_inputs(api, headers, model_id, data: bytes):
    return api.client.post(f"/api/v1/models/{model_id}/validation-inputs", headers=headers,
                           files={"file": ("inputs.npz", data)})


def nothing_kept(api, model_id) -> bool:
    kept = storage.validation_inputs_path(api.settings, model_id, "x").parent
    uploads = list(api.settings.tmp_dir.glob("upload-*"))
    return not (kept.exists() and any(kept.iterdir())) and not uploads


def test_a_job_validates_on_the_uploaded_inputs_and_warn_keeps_its_artifact(api, make_model):
    headers = api.auth()
    model = api.upload(headers, make_model()).json()
    answer = upload_inputs(api, headers, model["id"], npz(x=np.zeros((3, 1, 3, 8, 8), np.float32)))
    assert answer.status_code == 201, answer.text
    assert answer.json()["samples"] == 3
    job = api.client.post("/api/v1/jobs", headers=headers, json={
        "model_id": model["id"], "validation": {"mode": "warn", "tolerance": [1e-12, 0], "bisect": True,
                                                "inputs_id": answer.json()["id"]}}).json()
    assert run_compile_job(job["id"], api.settings, api.app.state.db, worker="test") == "succeeded"
    report = api.client.get(f"/api/v1/jobs/{job['id']}/report", headers=headers).json()
    val = report["validation"]
    assert val["inputs"] == "3 user sample(s)" and val["on_mismatch"] == "warn" and val["user_tolerance"] == [1e-12, 0]
    assert val["max_abs_err"] == 0.0 and val["passed"]  # zeros in, zeros out: exact even at 1e-12
    assert val["bisect"]["compared"] >= 1


@pytest.mark.parametrize("data, status, needle", [
    (npz(input=np.zeros((1, 3, 8, 8), np.float32)), 422, "missing input(s) 'x'"),
    (npz(x=np.zeros((1, 3, 8, 8), np.float64)), 422, "input 'x' is float64, the model takes float32"),
    (npz(x=np.zeros((1, 3, 4, 4), np.float32)), 422, "input 'x' has shape [1, 3, 4, 4]"),
    (b"PK\x03\x04 truncated", 422, "not a readable .npz"),
    (npz(x=np.zeros((700_000,), np.float32)), 413, "larger than the limit"),
])
def test_bad_validation_inputs_are_refused_and_nothing_is_kept(api, make_model, data, status, needle):
    headers = api.auth()
    model = api.upload(headers, make_model()).json()
    answer = upload_inputs(api, headers, model["id"], data)
    assert answer.status_code == status, answer.text
    assert needle in json.dumps(answer.json()["detail"])
    assert "/tmp" not in json.dumps(answer.json()["detail"])  # the server's paths stay private
    assert nothing_kept(api, model["id"])


@pytest.mark.parametrize("validation, needle", [
    ({"inputs_id": "0123456789abcdef"}, "no such validation inputs"),
    ({"inputs_id": "../../etc"}, "no such validation inputs"),
    ({"tolerance": [-1]}, "finite and >= 0"),
    ({"tolerance": [1, 2, 3]}, "at most 2"),
    ({"mode": "sometimes"}, "error"),
])
def test_bad_validation_options_are_422(api, make_model, validation, needle):
    headers = api.auth()
    model = api.upload(headers, make_model()).json()
    answer = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"], "validation": validation})
    assert answer.status_code == 422 and needle in json.dumps(answer.json()["detail"]), answer.text
    assert api.queued == []


def test_another_users_model_takes_no_inputs(api, make_model):
    model = api.upload(api.auth("alice"), make_model()).json()
    answer = upload_inputs(api, api.auth("bob"), model["id"], npz(x=np.zeros((1, 3, 8, 8), np.float32)))
    assert answer.status_code == 404
