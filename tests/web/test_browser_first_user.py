"""What a first user meets in the browser: API docs that render offline, file names (and the latency ratio) in the
job list however the requests race, the target-aware check, deleting jobs and models, and the -O levels explained."""
from __future__ import annotations

import re
import time

import httpx
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tests.conftest import tiny_model
from tests.web.test_browser import SCREENSHOTS, browser, page, sign_in  # noqa: F401 - the shared browser fixtures

pytestmark = pytest.mark.slow


def _upload(service, data: bytes, name: str) -> dict:
    response = httpx.post(service.url + "/api/v1/models", headers=service.headers, files={"file": (name, data)})
    assert response.status_code in (200, 201), response.text
    return response.json()


def _finished_job(service, model_id: str) -> dict:
    job = httpx.post(service.url + "/api/v1/jobs", headers=service.headers, json={"model_id": model_id}).json()
    deadline = time.monotonic() + 180
    while job["status"] in ("queued", "running") and time.monotonic() < deadline:
        time.sleep(0.3)
        job = httpx.get(f"{service.url}/api/v1/jobs/{job['id']}", headers=service.headers).json()
    assert job["status"] == "succeeded", job
    return job


@pytest.mark.parametrize("path,ready", [("/docs", ".swagger-ui .info .title"), ("/redoc", "h1")])
def test_api_docs_render_with_every_other_host_blocked(page, live_service, path, ready):  # noqa: F811
    from playwright.sync_api import expect

    blocked: list[str] = []

    def only_the_server(route):
        if route.request.url.startswith(live_service.url):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    page.route("**/*", only_the_server)
    page.goto(live_service.url + path)
    expect(page.locator(ready).first).to_contain_text("Kiln", timeout=30_000)
    if path == "/docs":
        page.get_by_role("button", name="Authorize").click()  # the Bearer scheme is declared
        expect(page.get_by_text("bearer  (http, Bearer)")).to_be_visible()
        page.screenshot(path=str(SCREENSHOTS / "docs-offline.png"))
    assert blocked == [], f"the docs page asked other hosts for {blocked}"


def test_job_list_shows_file_names_when_jobs_load_before_models(page, live_service):  # noqa: F811
    from playwright.sync_api import expect

    model = _upload(live_service, tiny_model(seed=31), "late_models.onnx")
    job = _finished_job(live_service, model["id"])

    def late(route):
        time.sleep(1.5)  # GET /models answers after GET /jobs: the list must redraw with the names
        route.continue_()

    page.route("**/api/v1/models", late)
    sign_in(page, live_service)
    row = page.locator(f"[data-job-id='{job['id']}']")
    expect(row.get_by_test_id("job-open")).to_have_text("late_models.onnx")
    report = httpx.get(f"{live_service.url}/api/v1/jobs/{job['id']}/report", headers=live_service.headers).json()
    # "tuned": this job measured trials, or applied configs other jobs of this server tuned (records)
    tuned = report["tuning"]["trials"] > 0 or any(k.get("tuned") for k in report["kernels"])
    expect(row.get_by_test_id("job-result")).to_have_text(
        f"{report['latency_ms']['ratio']:.2f}× ORT latency" + (" · tuned" if tuned else ""))
    page.get_by_test_id("jobs-list").screenshot(path=str(SCREENSHOTS / "jobs-list-file-names.png"))


def test_the_form_says_what_a_target_cannot_compile(page, live_service):  # noqa: F811
    from playwright.sync_api import expect

    k = helper.make_tensor("k", TensorProto.INT64, [1], [2])
    graph = helper.make_graph([helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1)], "topk",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, 2]),
                               helper.make_tensor_value_info("i", TensorProto.INT64, [2, 2])], [k])
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx_model.ir_version = 8
    _upload(live_service, onnx_model.SerializeToString(), "topk_model.onnx")
    sign_in(page, live_service)
    page.get_by_test_id("model-select").select_option(label=page.get_by_test_id("model-select").locator(
        "option", has_text="topk_model.onnx").inner_text())
    page.get_by_test_id("target-select").select_option("cuda")
    warning = page.get_by_test_id("target-warning")
    expect(warning).to_contain_text("cuda cannot compile this op of topk_model.onnx: TopK")
    expect(page.get_by_test_id("create-job")).to_be_disabled()
    page.get_by_test_id("target-select").select_option("native")
    expect(warning).to_be_hidden()
    expect(page.get_by_test_id("create-job")).to_be_enabled()


def test_opt_levels_are_explained_and_a_time_budget_reaches_the_job(page, live_service):  # noqa: F811
    from playwright.sync_api import expect

    _upload(live_service, tiny_model(seed=32), "explained.onnx")
    sign_in(page, live_service)
    expect(page.get_by_test_id("docs-link")).to_have_attribute("href", "/docs")
    page.get_by_test_id("model-select").select_option(label=page.get_by_test_id("model-select").locator(
        "option", has_text="explained.onnx").inner_text())
    hint = page.get_by_test_id("opt-hint")
    expect(hint).to_contain_text("data layouts")
    page.get_by_test_id("opt-level-select").select_option("0")
    expect(hint).to_contain_text("one kernel per op")
    page.get_by_test_id("time-budget-input").fill("-3")
    page.get_by_test_id("create-job").click()
    expect(page.get_by_test_id("job-form-error")).to_contain_text("time budget must be a number of seconds")
    page.get_by_test_id("time-budget-input").fill("45")
    page.get_by_test_id("create-job").click()
    expect(page).to_have_url(re.compile(r"#/jobs/\w+$"))  # the new job's page opens
    jobs = httpx.get(live_service.url + "/api/v1/jobs", headers=live_service.headers).json()
    expect(page.get_by_test_id("job-page")).to_have_attribute("data-job-id", jobs[0]["id"])
    assert jobs[0]["tuning"]["time_budget_s"] == 45 and jobs[0]["opt_level"] == 0


def test_delete_an_ended_job_then_the_model(page, live_service, tmp_path):  # noqa: F811
    from playwright.sync_api import expect

    data = tiny_model(seed=33)
    model = _upload(live_service, data, "to_delete.onnx")
    job = _finished_job(live_service, model["id"])
    artifact = httpx.get(f"{live_service.url}/api/v1/jobs/{job['id']}/artifact", headers=live_service.headers)
    (tmp_path / "a.tar.gz").write_bytes(artifact.content)
    from core.runtime import load

    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    expected = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(load(tmp_path / "a.tar.gz").run({"x": x})["y"], expected, rtol=1e-4, atol=1e-5)

    page.on("dialog", lambda dialog: dialog.accept())
    sign_in(page, live_service)
    row = page.locator(f"[data-job-id='{job['id']}']")
    expect(row.get_by_test_id("job-cancel")).to_be_hidden()
    row.get_by_test_id("job-delete").click()
    expect(row).to_have_count(0)
    assert httpx.get(f"{live_service.url}/api/v1/jobs/{job['id']}", headers=live_service.headers).status_code == 404
    page.get_by_test_id("model-select").select_option(model["id"])
    page.get_by_test_id("model-delete").click()
    expect(page.get_by_test_id("job-form-notice")).to_contain_text("to_delete.onnx deleted")
    expect(page.get_by_test_id("model-select").locator("option", has_text="to_delete.onnx")).to_have_count(0)
    assert httpx.get(f"{live_service.url}/api/v1/models/{model['id']}", headers=live_service.headers).status_code == 404
