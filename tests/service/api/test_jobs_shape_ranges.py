"""Jobs with input-shape ranges: parsed once by the request schema (422 with the reason), stored as text,
compiled by the worker into one artifact that runs every batch in range."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from core.runtime import load
from workers.compile_job import run_compile_job


@pytest.mark.parametrize("dims,message", [
    ([0, 3, 8, 8], "positive"), (["0..0", 3, 8, 8], "positive"), (["8..2", 3, 8, 8], "above its high end"),
    (["1..x", 3, 8, 8], "bad dimension"), (["1..4", "1..3", 8, 8], "dim 1 is fixed to 3"),
    (["1..4", 3, 8], "does not fit"),
])
def test_bad_ranges_are_422(api, make_model, dims, message):
    headers = api.auth()
    model = api.upload(headers, make_model(symbolic=True)).json()
    response = api.client.post("/api/v1/jobs", headers=headers,
                               json={"model_id": model["id"], "input_shapes": {"x": dims}})
    assert response.status_code == 422, response.text
    assert message in response.json()["detail"]["message"]
    assert api.queued == []


def test_a_ranged_job_builds_one_artifact_for_every_batch(api, make_model, tmp_path):
    headers = api.auth()
    data = make_model(symbolic=True)
    model = api.upload(headers, data).json()
    response = api.client.post("/api/v1/jobs", headers=headers,
                               json={"model_id": model["id"], "input_shapes": {"x": ["1..4", 3, 8, 8]}})
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["input_shapes"] == {"x": ["1..4", 3, 8, 8]}
    assert run_compile_job(job["id"], api.settings, api.app.state.db, worker="test") == "succeeded"
    artifact = tmp_path / "a.tar.gz"
    artifact.write_bytes(api.client.get(f"/api/v1/jobs/{job['id']}/artifact", headers=headers).content)
    session = ort.InferenceSession(data)
    with load(artifact) as module:
        for batch in (1, 3):
            x = np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float32)
            np.testing.assert_allclose(module.run({"x": x})["y"], session.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
