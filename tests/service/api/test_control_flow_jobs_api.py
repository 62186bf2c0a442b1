"""The job option `max_trip_count` over HTTP: a greedy decoder whose loop runs at run time compiles, validates
against ONNX Runtime and runs from the downloaded artifact; without the option the job is refused up front (422)."""
from __future__ import annotations

import io
import tarfile

import numpy as np
import onnxruntime as ort

import core
from tests.core.frontend.test_frontend_control_flow_runtime import _greedy_decoder
from workers.compile_job import run_compile_job


def _job(api, headers, model_id: str, **options):
    job = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model_id, "quick": True, **options})
    assert job.status_code == 201, job.text
    run_compile_job(job.json()["id"], api.settings, api.app.state.db, worker="test")
    return api.client.get(f"/api/v1/jobs/{job.json()['id']}", headers=headers).json()


def test_a_greedy_decoder_job_with_a_trip_bound(api, tmp_path):
    headers = api.auth()
    model = _greedy_decoder()
    uploaded = api.upload(headers, model)
    assert uploaded.status_code == 201, uploaded.text
    model_id = uploaded.json()["id"]
    refused = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model_id, "quick": True})
    assert refused.status_code == 422 and "max_trip_count" in refused.json()["detail"]["message"], refused.text
    done = _job(api, headers, model_id, max_trip_count=24)
    assert done["status"] == "succeeded", done
    artifact = api.client.get(f"/api/v1/jobs/{done['id']}/artifact", headers=headers)
    with tarfile.open(fileobj=io.BytesIO(artifact.content)) as tar:
        tar.extractall(tmp_path, filter="data")
    module = core.runtime.load(tmp_path)
    feeds = {"start": np.array([[5]], np.int64), "M": np.array(20, np.int64), "eos": np.array(3, np.int64)}
    expected = ort.InferenceSession(model).run(None, feeds)
    got = module.run(feeds)
    np.testing.assert_array_equal(got["tokens_out"], expected[0])
    np.testing.assert_allclose(got["scores"], expected[1], rtol=1e-5, atol=1e-5)
