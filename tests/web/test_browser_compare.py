"""The compare view in a real browser: two real compiled jobs of one model side by side (latency with quartiles,
errors, tuning, per-kernel time and the manifest entries that differ), picked from the job page."""
from __future__ import annotations

import time

import httpx
import pytest

from tests.conftest import tiny_model
from tests.web.test_browser import SCREENSHOTS, browser, page, sign_in  # noqa: F401 - the shared browser fixtures

pytestmark = pytest.mark.slow


def _compiled(service, model_id: str, opt_level: int, **body) -> str:
    job = httpx.post(service.url + "/api/v1/jobs", headers=service.headers,
                     json={"model_id": model_id, "opt_level": opt_level, **body}).json()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        state = httpx.get(f"{service.url}/api/v1/jobs/{job['id']}", headers=service.headers).json()
        if state["status"] not in ("queued", "running"):
            assert state["status"] == "succeeded", state
            return job["id"]
        time.sleep(0.5)
    raise AssertionError(f"job {job['id']} did not finish")


def test_two_jobs_of_a_model_side_by_side(page, live_service):  # noqa: F811
    from playwright.sync_api import expect

    model = httpx.post(live_service.url + "/api/v1/models", headers=live_service.headers,
                       files={"file": ("compare_me.onnx", tiny_model(seed=7))}).json()
    first, second = _compiled(live_service, model["id"], 3), _compiled(live_service, model["id"], 1)
    third = _compiled(live_service, model["id"], 3, name="tiny_again")  # the same kernels as first's: each pairs

    sign_in(page, live_service)
    page.goto(f"{live_service.url}/#/jobs/{first}")
    page.get_by_test_id("compare-link").click()
    expect(page.get_by_test_id("compare-page")).to_be_visible()
    page.get_by_test_id("compare-pick").select_option(second)
    summary = page.get_by_test_id("compare-summary")
    expect(summary).to_be_visible()
    expect(summary.locator("tr[data-row='Optimization level']")).to_contain_text("O3")
    expect(summary.locator("tr[data-row='Optimization level']")).to_contain_text("O1")
    quartiles = summary.locator("tr[data-row='Latency quartiles'] td")
    expect(quartiles).to_have_count(2)
    for cell in quartiles.all():
        assert " – " in cell.inner_text() and "ms" in cell.inner_text()
    errors = summary.locator("tr[data-row='Max abs error vs ORT'] td").all_inner_texts()
    assert all(e != "–" for e in errors), errors
    expect(summary.locator("tr[data-row='Tuning']")).to_contain_text("no tuning")
    kernels = page.get_by_test_id("compare-kernels").locator("tbody tr")
    assert kernels.count() >= 1 and "ms" in kernels.first.inner_text()
    manifest = page.get_by_test_id("compare-manifest")
    expect(manifest.locator("tr[data-row='options.opt_level']")).to_contain_text("3")
    expect(manifest.locator("tr[data-row='options.opt_level']")).to_contain_text("1")
    assert page.url.endswith(f"#/compare/{first}/{second}")
    # The kernels' ratios as a chart: one bar per kernel both builds timed (O1 fused otherwise: none here).
    expect(page.get_by_test_id("compare-kernel-chart")).to_contain_text("No kernel is in both builds")
    compared = httpx.get(f"{live_service.url}/api/v1/jobs/{first}/compare/{second}", headers=live_service.headers).json()
    busy = [side for side in ("a", "b") if compared[side]["report"]["latency_ms"].get("busy")]
    expect(page.get_by_test_id("compare-busy")).to_have_count(1 if busy else 0)  # as timed on this machine now
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "compare_jobs.png"), full_page=True)

    # A build timed on a busy machine (its report says so: latency_ms.busy) is flagged. Which build was busy depends
    # on the machine; the server's answer is marked here so that the view's warning is checked either way.
    def busy_b(route):
        answer = route.fetch().json()
        answer["b"]["report"]["latency_ms"].update(busy=True, warning="the machine was busy: latencies varied a lot")
        route.fulfill(json=answer)

    page.get_by_test_id("compare-pick").select_option(third)
    paired = page.get_by_test_id("compare-kernels").locator("tbody tr")
    expect(paired.first).to_be_visible()
    both = sum(1 for row in paired.all_inner_texts() if not row.rstrip().endswith("–"))
    assert both >= 1, paired.all_inner_texts()
    expect(page.get_by_test_id("compare-kernel-chart").locator("rect")).to_have_count(both)
    page.route(f"**/api/v1/jobs/{first}/compare/{third}", busy_b)
    page.reload()
    warning = page.get_by_test_id("compare-busy")
    expect(warning).to_contain_text("busy machine")
    expect(warning).to_contain_text("B (the machine was busy")
    page.screenshot(path=str(SCREENSHOTS / "compare_jobs_busy.png"), full_page=True)
