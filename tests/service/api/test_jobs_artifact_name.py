"""A job's artifact name (`"name"` in POST /jobs, kept in Job.options): the worker's compile names the
library, header and C symbols after it; a name that is not a usable C prefix is a 422 before queueing."""
from __future__ import annotations

import io
import tarfile

from tests.conftest import assert_artifact_matches_onnxruntime
from service.core.tables import Job
from workers.compile_job import run_compile_job


def test_a_named_job_ships_a_named_artifact(api, make_model, tmp_path):
    headers = api.auth()
    model = api.upload(headers, make_model()).json()
    response = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"], "name": "edge_net"})
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    with api.app.state.db.session() as db:
        assert db.get(Job, job_id).options == {"name": "edge_net"}
    assert run_compile_job(job_id, api.settings, api.app.state.db, worker="test") == "succeeded"
    artifact = api.client.get(f"/api/v1/jobs/{job_id}/artifact", headers=headers)
    with tarfile.open(fileobj=io.BytesIO(artifact.content)) as tar:
        names = tar.getnames()
        tar.extractall(tmp_path, filter="data")
    assert {"libedge_net.so", "edge_net.h", "main.c", "Makefile"} <= set(names) and "libkiln_model.so" not in names
    assert "edge_net_run(" in (tmp_path / "edge_net.h").read_text()
    assert_artifact_matches_onnxruntime(tmp_path, make_model(), seed=2)


def test_an_unusable_name_is_422_and_nothing_is_queued(api, make_model):
    headers = api.auth()
    model = api.upload(headers, make_model()).json()
    response = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"], "name": "My Net"})
    assert response.status_code == 422 and "bad artifact name" in response.text
    assert api.queued == []
