"""Jobs: creation checks, the compile run by the worker's job function, status, events, outputs, cancel."""
from __future__ import annotations

import json

import pytest

from tests.conftest import assert_artifact_matches_onnxruntime
from workers.compile_job import run_compile_job


def _model_and_job(api, make_model, headers, **job):
    model = api.upload(headers, make_model()).json()
    response = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"], **job})
    assert response.status_code == 201, response.text
    return model, response.json()


def _run(api, job_id):
    return run_compile_job(job_id, api.settings, api.app.state.db, worker="test")


def test_create_job_queues_it(api, make_model):
    headers = api.auth()
    _, job = _model_and_job(api, make_model, headers, target="native", opt_level=2)
    assert job["status"] == "queued" and job["stage"] == "queued" and job["progress"] == 0
    assert job["opt_level"] == 2 and job["tuning"] == {"trials": 0, "time_budget_s": None}
    assert api.queued == [job["id"]]
    assert api.client.get("/api/v1/jobs", headers=headers).json()[0]["id"] == job["id"]


@pytest.mark.parametrize("body,message", [
    ({"target": "sparc"}, "unknown target"),
    ({"opt_level": 7}, "less than or equal to 3"),
    ({"tuning": {"time_budget_s": 10 ** 7}}, "over this server's job time limit"),
    ({"target": "aarch64", "tuning": {"trials": 8}}, "cannot be tuned here"),
    ({"tuning": {"trials": 10 ** 9}}, "over this server's limit"),
    ({"tuning": {"trials": -1}}, "greater than or equal to 0"),
    ({"input_shapes": {"nope": [1]}}, "unknown inputs"),
    ({"bogus": 1}, "Extra inputs"),
])
def test_bad_job_requests_are_422(api, make_model, body, message):
    headers = api.auth()
    model = api.upload(headers, make_model()).json()
    response = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"], **body})
    assert response.status_code == 422
    assert message.lower() in json.dumps(response.json()["detail"]).lower()
    assert api.queued == [] and api.client.get("/api/v1/jobs", headers=headers).json() == []


def test_malformed_json_is_422(api):
    response = api.client.post("/api/v1/jobs", headers={**api.auth(), "Content-Type": "application/json"},
                               content=b"{not json")
    assert response.status_code == 422


def test_symbolic_inputs_need_shapes(api, make_model):
    headers = api.auth()
    model = api.upload(headers, make_model(symbolic=True)).json()
    assert model["symbolic_inputs"] == ["x"] and model["inputs"][0]["shape"][0] == "batch"
    response = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"]})
    assert response.status_code == 422 and "symbolic" in response.json()["detail"]["message"]
    for shapes, message in (({"x": [8]}, "does not fit"), ({"x": [2, 3, 9, 8]}, "does not fit"),
                            ({"x": [0, 3, 8, 8]}, "positive")):
        bad = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"], "input_shapes": shapes})
        assert bad.status_code == 422 and message in bad.json()["detail"]["message"], shapes
    ok = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"], "input_shapes": {"x": [2, 3, 8, 8]}})
    assert ok.status_code == 201
    assert _run(api, ok.json()["id"]) == "succeeded"
    artifact = api.client.get(f"/api/v1/jobs/{ok.json()['id']}/artifact", headers=headers)
    assert artifact.status_code == 200


def test_job_runs_and_its_artifact_matches_onnxruntime(api, make_model, tmp_path):
    headers = api.auth()
    _, job = _model_and_job(api, make_model, headers)
    assert api.client.get(f"/api/v1/jobs/{job['id']}/artifact", headers=headers).status_code == 409
    assert _run(api, job["id"]) == "succeeded"
    done = api.client.get(f"/api/v1/jobs/{job['id']}", headers=headers).json()
    assert (done["status"], done["stage"], done["progress"], done["attempts"]) == ("succeeded", "succeeded", 1.0, 1)
    assert done["links"]["artifact"].endswith("/artifact") and done["finished_at"].endswith("Z")

    response = api.client.get(done["links"]["artifact"], headers=headers)
    assert response.headers["content-type"] == "application/gzip"
    (tmp_path / "artifact.tar.gz").write_bytes(response.content)
    assert_artifact_matches_onnxruntime(tmp_path / "artifact.tar.gz", make_model(), seed=1)

    report = api.client.get(done["links"]["report"], headers=headers).json()
    assert report["schema"] == 1 and report["validation"]["max_abs_err"] < 1e-4
    page = api.client.get(done["links"]["report"] + "?format=html", headers=headers)
    assert page.headers["content-type"].startswith("text/html") and "Kiln" in page.text


def test_events_stream_ends_with_the_final_state(api, make_model):
    headers = api.auth()
    _, job = _model_and_job(api, make_model, headers)
    _run(api, job["id"])
    text = api.client.get(f"/api/v1/jobs/{job['id']}/events", headers=headers).text
    events = [block for block in text.split("\n\n") if block.startswith("event:")]
    assert events[-1] == 'event: end\ndata: {"status": "succeeded"}'
    assert json.loads(events[-2].split("data: ", 1)[1])["status"] == "succeeded"


def test_cancel_a_queued_job(api, make_model):
    headers = api.auth()
    _, job = _model_and_job(api, make_model, headers)
    cancelled = api.client.delete(f"/api/v1/jobs/{job['id']}", headers=headers).json()
    assert cancelled["status"] == "cancelled" and cancelled["error"] == "cancelled by the user"
    assert _run(api, job["id"]) == "cancelled"  # the worker picks it up later and leaves it alone
    assert api.client.get(f"/api/v1/jobs/{job['id']}/artifact", headers=headers).status_code == 409


def test_deleting_an_ended_job_removes_it_and_its_outputs(api, make_model):
    headers = api.auth()
    _, job = _model_and_job(api, make_model, headers)
    assert _run(api, job["id"]) == "succeeded"
    outputs = api.settings.jobs_dir / job["id"]
    assert outputs.is_dir()
    removed = api.client.delete(f"/api/v1/jobs/{job['id']}", headers=headers)
    assert removed.status_code == 204 and not outputs.exists()
    assert api.client.get(f"/api/v1/jobs/{job['id']}", headers=headers).status_code == 404
    assert api.client.get("/api/v1/jobs", headers=headers).json() == []


def test_broker_down_fails_the_job_clearly(api, make_model):
    headers = api.auth()
    model = api.upload(headers, make_model()).json()

    def broken(job_id):
        raise ConnectionError("connection refused")

    api.app.state.enqueue = broken
    response = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"]})
    assert response.status_code == 503 and "queue is unavailable" in response.json()["detail"]["message"]
    assert api.client.get("/api/v1/jobs", headers=headers).json()[0]["status"] == "failed"
