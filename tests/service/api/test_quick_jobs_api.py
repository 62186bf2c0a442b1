"""The job option `quick` over HTTP (no latency benchmark, the report says so) and the kernel cache every job of a
machine shares (the data dir's, by default): a second job of the same model takes every kernel from it."""
from __future__ import annotations

from workers.compile_job import run_compile_job


def test_quick_jobs_skip_the_benchmark_and_share_the_data_dirs_kernel_cache(api, make_model):
    api.settings.kernel_cache = None  # the default: data_dir/kernel-cache (the suite turns it off)
    headers = api.auth()
    model = api.upload(headers, make_model()).json()
    reports = []
    for _ in range(2):
        job = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"], "quick": True})
        assert job.status_code == 201, job.text
        assert run_compile_job(job.json()["id"], api.settings, api.app.state.db, worker="test") == "succeeded"
        reports.append(api.client.get(f"/api/v1/jobs/{job.json()['id']}/report", headers=headers).json())
    for report in reports:
        assert report["quick"]["benchmark"] == "skipped" and "quick" in report["latency_ms"]["skipped"]
        assert report["validation"]["passed"]
        assert report["build"]["cache_dir"] == str(api.settings.data_dir / "kernel-cache")
    assert reports[0]["build"]["built"] == reports[0]["build"]["kernels"] > 0
    assert reports[1]["build"]["hit_rate"] == 1.0 and reports[1]["build"]["built"] == 0


def test_a_quick_option_that_is_not_a_boolean_is_refused(api, make_model):
    headers = api.auth()
    model = api.upload(headers, make_model()).json()
    answer = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"], "quick": "sometimes"})
    assert answer.status_code == 422 and "quick" in answer.text
