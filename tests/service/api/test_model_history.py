"""GET /models/{id}/jobs: a model's builds over time, with what each asked for and what its report measured."""
from __future__ import annotations

import json

from service.core import storage
from service.core.tables import Job
from workers.compile_job import run_compile_job


def test_a_models_history_lists_its_builds_oldest_first_with_their_figures(api, make_model):
    headers = api.auth()
    model = api.upload(headers, make_model()).json()
    other = api.upload(headers, make_model(seed=1)).json()
    requests = [{"opt_level": 3}, {"opt_level": 1, "validation": {"mode": "warn"}}, {"opt_level": 2}]
    jobs = [api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"], **r}).json()["id"]
            for r in requests]
    api.client.post("/api/v1/jobs", headers=headers, json={"model_id": other["id"]})  # not in this model's history
    for job_id in jobs[:2]:
        assert run_compile_job(job_id, api.settings, api.app.state.db, worker="test") == "succeeded"

    history = api.client.get(f"/api/v1/models/{model['id']}/jobs", headers=headers)
    assert history.status_code == 200, history.text
    builds = history.json()
    assert [b["job_id"] for b in builds] == jobs
    assert [(b["status"], b["opt_level"]) for b in builds] == [("succeeded", 3), ("succeeded", 1), ("queued", 2)]
    with api.app.state.db.session() as db:
        assert [b["options"] for b in builds] == [db.get(Job, job_id).options for job_id in jobs]
    for build in builds[:2]:
        report = json.loads((storage.job_dir(api.settings, build["job_id"]) / storage.REPORT_JSON).read_text())
        assert build["latency_ms"] == report["latency_ms"] and build["latency_ms"]["kiln"] > 0
        assert build["max_abs_err"] == report["validation"]["max_abs_err"] < 1e-4
    assert (builds[2]["latency_ms"], builds[2]["max_abs_err"], builds[2]["finished_at"]) == (None, None, None)

    newest = api.client.get(f"/api/v1/models/{model['id']}/jobs?limit=2", headers=headers).json()
    assert [b["job_id"] for b in newest] == jobs[1:]
    assert api.client.get(f"/api/v1/models/{model['id']}/jobs", headers=api.auth("bob")).status_code == 404
