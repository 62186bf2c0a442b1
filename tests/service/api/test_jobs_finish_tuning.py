"""A tuning job shows its estimate and best-so-far live (JobOut.tuning_progress), and POST /jobs/{id}/finish-tuning
makes it stop measuring and build with the best configs so far; the artifact still matches ONNX Runtime."""
from __future__ import annotations

from tests.conftest import assert_artifact_matches_onnxruntime
from workers import compile_job
from workers.compile_job import run_compile_job


def _tuning_job(api, headers, model_id, trials):
    response = api.client.post("/api/v1/jobs", headers=headers,
                               json={"model_id": model_id, "tuning": {"trials": trials, "time_budget_s": 300}})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def test_finish_tuning_builds_with_the_best_so_far_and_shows_it_live(api, make_model, monkeypatch, tmp_path):
    headers = api.auth()
    model = make_model()
    job_id = _tuning_job(api, headers, api.upload(headers, model).json()["id"], trials=400)
    seen: list[dict] = []
    real_writer = compile_job._tuning_writer

    def finishing_writer(*args):
        report = real_writer(*args)

        def wrapped(kind, status):
            report(kind, status)
            seen.append(api.client.get(f"/api/v1/jobs/{job_id}", headers=headers).json()["tuning_progress"])
            if kind == "tuning" and len(seen) == 2:  # after the first measured batch: finish now
                answer = api.client.post(f"/api/v1/jobs/{job_id}/finish-tuning", headers=headers)
                assert answer.status_code == 202 and answer.json()["tuning"]["finish_now"] is True, answer.text
        return wrapped

    monkeypatch.setattr(compile_job, "_tuning_writer", finishing_writer)
    assert run_compile_job(job_id, api.settings, api.app.state.db) == "succeeded"

    plan, first_batch = seen[0], seen[1]
    assert plan["trials"] == 0 and plan["planned"] == 400 and plan["estimate_s"] > 0 and plan["best_gflops"] is None
    assert 0 < first_batch["trials"] < 400 and first_batch["best_gflops"] > 0 and first_batch["left_s"] >= 0
    assert seen[-1]["finishing"] is True
    report = api.client.get(f"/api/v1/jobs/{job_id}/report", headers=headers).json()
    tuning = report["tuning"]
    assert tuning["finished_early"] is True and 0 < tuning["trials"] < 400
    # The worker passes the request on at the child's next batch message; the batch it had begun then still ends.
    assert tuning["trials"] <= first_batch["trials"] + 2 * 8
    assert [t["stopped"] for t in tuning["tasks"] if not t["cached"]][0] == "finished_early"
    assert report["validation"]["max_abs_err"] < 1e-4
    artifact = tmp_path / "artifact.tar.gz"
    artifact.write_bytes(api.client.get(f"/api/v1/jobs/{job_id}/artifact", headers=headers).content)
    assert_artifact_matches_onnxruntime(artifact, model)


def test_finish_tuning_needs_an_active_tuning_job(api, make_model):
    headers = api.auth()
    model_id = api.upload(headers, make_model()).json()["id"]
    untuned = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model_id}).json()["id"]
    answer = api.client.post(f"/api/v1/jobs/{untuned}/finish-tuning", headers=headers)
    assert answer.status_code == 409 and "no tuning budget" in answer.json()["detail"]["message"]
    assert run_compile_job(untuned, api.settings, api.app.state.db) == "succeeded"
    answer = api.client.post(f"/api/v1/jobs/{untuned}/finish-tuning", headers=headers)
    assert answer.status_code == 409 and "succeeded" in answer.json()["detail"]["message"]
    tuned = _tuning_job(api, headers, model_id, trials=8)
    assert api.client.post(f"/api/v1/jobs/{tuned}/finish-tuning", headers=api.auth("bob")).status_code == 404
