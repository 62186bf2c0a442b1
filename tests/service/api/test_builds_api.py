"""A model's builds in the service: the CI gate against a baseline job (timed by the worker, in the report), rebuilds
from the manifest (POST /jobs/{id}/rebuild) and two jobs side by side (GET /jobs/{a}/compare/{b})."""
from __future__ import annotations

import io
import json
import tarfile

import numpy as np

from service.core import storage
from tests.core.driver.test_pipeline_control_flow import _rate_model
from tests.gate_models import elementwise_chain
from workers.compile_job import run_compile_job


def _job(api, headers, **body) -> str:
    response = api.client.post("/api/v1/jobs", headers=headers, json=body)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def _run(api, job_id: str) -> dict:
    assert run_compile_job(job_id, api.settings, api.app.state.db, worker="test") == "succeeded"
    return json.loads((storage.job_dir(api.settings, job_id) / storage.REPORT_JSON).read_text())


def test_the_gate_fails_an_O0_build_against_its_O3_baseline_and_passes_the_same_options(api):
    headers = api.auth()
    model = api.upload(headers, elementwise_chain()).json()["id"]
    base = _job(api, headers, model_id=model, opt_level=3)
    _run(api, base)
    gated = _job(api, headers, model_id=model, opt_level=0,
                 baseline={"job_id": base, "max_slowdown": 0.05, "max_error_growth": 2})
    slower = _run(api, gated)["baseline"]
    assert slower["verdict"] == "fail" and slower["ratio"] > 1.05
    assert slower["message"].startswith("gate failed: ") and f"slower than baseline job {base}" in slower["message"]
    assert slower["candidate_max_abs_err"] < 1e-5 and slower["baseline_max_abs_err"] < 1e-5
    same = _run(api, _job(api, headers, model_id=model, opt_level=3, baseline={"job_id": base, "max_slowdown": 1.0}))
    assert same["baseline"]["verdict"] == "pass", same["baseline"]["message"]
    # Lists and job pages mark a failed gate (the job itself succeeded: it built); the baseline has no gate.
    jobs = {j["id"]: j for j in api.client.get("/api/v1/jobs", headers=headers).json()}
    assert jobs[gated]["status"] == "succeeded" and jobs[gated]["gate"]["passed"] is False
    assert jobs[gated]["gate"]["message"] == slower["message"] and jobs[base]["gate"] is None
    assert [j["gate"]["passed"] for j in jobs.values() if j["gate"] and j["id"] != gated] == [True]


def test_a_baseline_must_be_a_succeeded_build_of_the_same_model(api, make_model):
    headers = api.auth()
    model = api.upload(headers, make_model()).json()["id"]
    other = api.upload(headers, make_model(seed=1)).json()["id"]
    queued = _job(api, headers, model_id=model)
    foreign = _job(api, headers, model_id=other)
    _run(api, foreign)
    for baseline, message in (({"job_id": queued}, "has not succeeded"), ({"job_id": foreign}, "another model"),
                              ({"job_id": "nope"}, "no such job"), ({"job_id": queued, "max_slowdown": -1}, "")):
        response = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model, "baseline": baseline})
        assert response.status_code == 422 and message in response.text, response.text
    bob = api.client.post("/api/v1/jobs", headers=api.auth("bob"), json={
        "model_id": api.upload(api.auth("bob"), make_model(seed=1)).json()["id"], "baseline": {"job_id": foreign}})
    assert bob.status_code == 422 and "no such job" in bob.text  # another user's job is nobody's


def test_a_rebuild_job_is_byte_identical_and_two_jobs_compare_side_by_side(api, make_model):
    headers = api.auth()
    model = api.upload(headers, make_model()).json()["id"]
    first = _job(api, headers, model_id=model, opt_level=3, name="tiny")
    assert api.client.post(f"/api/v1/jobs/{first}/rebuild", headers=headers).status_code == 409  # not built yet
    _run(api, first)
    response = api.client.post(f"/api/v1/jobs/{first}/rebuild", headers=headers)
    assert response.status_code == 201, response.text
    again = response.json()["id"]
    report = _run(api, again)
    assert report["rebuild"]["of"] == first and report["rebuild"]["identical"], report["rebuild"]
    with tarfile.open(storage.job_dir(api.settings, first) / storage.ARTIFACT) as a, \
            tarfile.open(storage.job_dir(api.settings, again) / storage.ARTIFACT) as b:
        assert a.extractfile("libtiny.so").read() == b.extractfile("libtiny.so").read()
    assert api.client.post(f"/api/v1/jobs/{first}/rebuild", headers=api.auth("bob")).status_code == 404

    lower = _job(api, headers, model_id=model, opt_level=1, name="tiny")
    _run(api, lower)
    comparison = api.client.get(f"/api/v1/jobs/{first}/compare/{lower}", headers=headers)
    assert comparison.status_code == 200, comparison.text
    body = comparison.json()
    assert (body["a"]["opt_level"], body["b"]["opt_level"]) == (3, 1)
    assert body["a"]["report"]["latency_ms"]["kiln"] > 0 and body["b"]["report"]["kernels"]
    assert {"key": "options.opt_level", "a": 3, "b": 1} in body["manifest_differences"]
    other = _job(api, headers, model_id=api.upload(headers, make_model(seed=1)).json()["id"])
    assert api.client.get(f"/api/v1/jobs/{first}/compare/{other}", headers=headers).status_code == 422


def test_the_gate_times_the_jobs_validation_inputs_and_without_them_says_why_it_cannot(api):
    """The rate model's If (silero VAD's pattern): a random rate takes the branch refused at 512 samples, so the
    worker's gate runs the job's validation inputs, and without any says so instead of failing obscurely."""
    headers = api.auth()
    model = api.upload(headers, _rate_model()).json()["id"]
    buffer = io.BytesIO()
    np.savez(buffer, x=np.random.default_rng(0).standard_normal((1, 512)).astype(np.float32), rate=np.array(16000))
    inputs = api.client.post(f"/api/v1/models/{model}/validation-inputs", headers=headers,
                             files={"file": ("inputs.npz", buffer.getvalue())})
    assert inputs.status_code == 201, inputs.text
    shapes, validation = {"x": [1, 512]}, {"inputs_id": inputs.json()["id"]}
    base = _job(api, headers, model_id=model, input_shapes=shapes, validation=validation)
    _run(api, base)
    gate = {"job_id": base, "max_slowdown": 10.0}
    same = _run(api, _job(api, headers, model_id=model, input_shapes=shapes, validation=validation, baseline=gate))
    assert same["baseline"]["verdict"] == "pass", same["baseline"]["message"]
    assert same["baseline"]["candidate_max_abs_err"] < 1e-4
    blind = _run(api, _job(api, headers, model_id=model, input_shapes=shapes, validation={"mode": "off"},
                           baseline=gate))["baseline"]
    assert blind["verdict"] == "fail"
    assert "the gate's seeded random inputs took a path the build does not run" in blind["message"]
    assert "validation inputs" in blind["message"]
