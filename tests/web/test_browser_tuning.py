"""The browser while a job tunes (best GFLOP/s so far and time left, live, and "finish now with the best so far"),
and searching and paging the job list; screenshots of both go to tests/web/screenshots/."""
from __future__ import annotations

import re
import time

import httpx
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import tiny_model
from tests.web.test_browser import COMPILE_TIMEOUT_MS, SCREENSHOTS, browser, page, sign_in  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow


def _upload(service, data: bytes, name: str) -> dict:
    response = httpx.post(service.url + "/api/v1/models", headers=service.headers, files={"file": (name, data)})
    assert response.status_code in (200, 201), response.text
    return response.json()


def _job(service, model_id: str, **body) -> dict:
    response = httpx.post(service.url + "/api/v1/jobs", headers=service.headers, json={"model_id": model_id, **body})
    assert response.status_code == 201, response.text
    return response.json()


def _conv_model() -> bytes:
    """A 16 -> 32 channel 3x3 conv on 32x32: a space of hundreds of configs, so tuning is still measuring when the
    test asks it to finish (tiny_model's 36 configs ran out first on a busy CI machine)."""
    weight = numpy_helper.from_array(np.random.default_rng(41).standard_normal((32, 16, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("GlobalAveragePool", ["r"], ["y"])],
        "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 1, 1])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_a_tuning_job_shows_its_best_so_far_and_finishes_now(page, live_service):  # noqa: F811
    from playwright.sync_api import expect

    model = _upload(live_service, _conv_model(), "tuned_live.onnx")
    job = _job(live_service, model["id"], tuning={"trials": 3000, "time_budget_s": 240})
    sign_in(page, live_service)
    row = page.locator(f"[data-job-id='{job['id']}']")
    expect(row.get_by_test_id("job-stage")).to_contain_text("GFLOP/s", timeout=COMPILE_TIMEOUT_MS)
    expect(row.get_by_test_id("job-stage")).to_contain_text("left")
    expect(row.get_by_test_id("job-tag")).to_have_text("tuned 3000")  # the list's badge for a tuning job
    page.get_by_test_id("jobs-list").screenshot(path=str(SCREENSHOTS / "jobs-list-tuning.png"))

    row.get_by_test_id("job-open").click()
    live = page.get_by_test_id("job-page-tuning")
    # New trials planned: the budget less what the server's shared records already hold for these workloads.
    expect(live).to_contain_text(re.compile(r"tuning \d+/(\d+) trials"))
    expect(live).to_contain_text("GFLOP/s")
    # The live chart: best GFLOP/s against trials per task, the tuned tasks together, and the best of all; a few
    # batches in, it has lines to show.
    expect(live).to_contain_text(re.compile(r"tuning (2[4-9]|[3-9]\d|\d{3,})/\d+ trials"), timeout=COMPILE_TIMEOUT_MS)
    chart = page.get_by_test_id("tuning-chart")
    expect(chart).to_be_visible()
    expect(chart).to_contain_text(re.compile(r"Best so far: [\d.]+ GFLOP/s"))
    expect(chart.locator("path[data-series='whole model (tasks tuned so far)']")).to_have_count(1)
    progress = httpx.get(f"{live_service.url}/api/v1/jobs/{job['id']}", headers=live_service.headers).json()
    tasks = progress["tuning_progress"]["curves"]
    assert tasks and all(len(c["points"]) >= 1 and c["flops"] > 0 for c in tasks.values()), progress
    assert chart.locator("path").count() >= 2  # at least one task's line and the model's
    page.screenshot(path=str(SCREENSHOTS / "job-page-tuning.png"), full_page=True)

    page.get_by_test_id("job-page-finish-tuning").click()
    # Acknowledged at once, before the worker ends the batch it is measuring.
    expect(page.get_by_test_id("finish-ack")).to_contain_text("Finishing now", timeout=1_000)
    expect(page.get_by_test_id("job-page-finish-tuning")).to_be_hidden()
    expect(page.get_by_test_id("job-page")).to_have_attribute("data-status", "succeeded", timeout=COMPILE_TIMEOUT_MS)
    expect(live).to_be_hidden()
    page.screenshot(path=str(SCREENSHOTS / "job-page-finished-early.png"), full_page=True)
    report = httpx.get(f"{live_service.url}/api/v1/jobs/{job['id']}/report", headers=live_service.headers).json()
    assert report["tuning"]["finished_early"] is True and 0 < report["tuning"]["trials"] < 3000
    assert report["validation"]["max_abs_err"] < 1e-4  # the artifact built with the best so far matches ORT


def test_the_job_list_is_searched_and_paged(page, live_service):  # noqa: F811
    from playwright.sync_api import expect

    probe = _upload(live_service, tiny_model(seed=42), "pager_probe.onnx")
    other = _upload(live_service, tiny_model(seed=43), "unrelated_net.onnx")
    ids = []
    for _ in range(21):  # one more than a page; cancelled at once, so the worker compiles none of them
        ids.append(_job(live_service, probe["id"])["id"])
        httpx.delete(f"{live_service.url}/api/v1/jobs/{ids[-1]}", headers=live_service.headers)
    unrelated = _job(live_service, other["id"])["id"]
    sign_in(page, live_service)
    expect(page.locator(f"[data-job-id='{unrelated}']")).to_be_attached()

    page.get_by_test_id("jobs-search").fill("PAGER_probe")
    rows = page.get_by_test_id("job-row")
    expect(rows).to_have_count(20)
    expect(page.get_by_test_id("jobs-page")).to_have_text("1–20 of 21")
    expect(page.locator(f"[data-job-id='{unrelated}']")).to_have_count(0)
    expect(page.locator(f"[data-job-id='{ids[-1]}']")).to_be_attached()  # newest first
    page.screenshot(path=str(SCREENSHOTS / "jobs-list-search.png"), full_page=True)
    page.get_by_test_id("jobs-older").click()
    expect(page.get_by_test_id("jobs-page")).to_have_text("21–21 of 21")
    expect(rows).to_have_count(1)
    expect(page.locator(f"[data-job-id='{ids[0]}']")).to_be_attached()
    expect(page.get_by_test_id("jobs-older")).to_be_disabled()

    page.get_by_test_id("jobs-status-filter").select_option("cancelled")
    expect(page.locator(f"[data-job-id='{unrelated}']")).to_have_count(0)
    page.get_by_test_id("jobs-search").fill("no such model")
    expect(page.get_by_test_id("jobs-empty")).to_have_text("No job matches the search.")
    page.get_by_test_id("jobs-search").fill("")
    page.get_by_test_id("jobs-status-filter").select_option("")
    expect(page.locator(f"[data-job-id='{unrelated}']")).to_be_attached()
    api = httpx.get(f"{live_service.url}/api/v1/jobs", headers=live_service.headers,
                    params={"q": "pager_probe", "limit": 20, "offset": 20})
    assert [j["id"] for j in api.json()] == [ids[0]] and api.headers["X-Total-Count"] == "21"
    deadline = time.monotonic() + 120  # let the unrelated job end, so later tests find the worker idle
    while httpx.get(f"{live_service.url}/api/v1/jobs/{unrelated}", headers=live_service.headers).json()["status"] \
            in ("queued", "running") and time.monotonic() < deadline:
        time.sleep(0.5)
