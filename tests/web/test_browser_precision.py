"""The compose form's Precision select in a real browser: fp16 reaches the job as `"precision": "fp16"` with no
calibration fields, and the server accepts it."""
from __future__ import annotations

import pytest

from tests.core.quantize.models import write_model
from tests.web.test_browser import browser, page, sign_in  # noqa: F401 - the shared browser fixtures

pytestmark = pytest.mark.slow


def test_fp16_reaches_the_job(page, live_service, tmp_path):  # noqa: F811
    from playwright.sync_api import expect

    sign_in(page, live_service)
    page.get_by_test_id("file-input").set_input_files(write_model(tmp_path))
    expect(page.get_by_test_id("model-info")).to_contain_text("[1, 3, 12, 12]")
    page.get_by_test_id("precision-select").select_option("fp16")
    expect(page.get_by_test_id("int8-fields")).to_be_hidden()
    with page.expect_response(lambda r: r.url.endswith("/api/v1/jobs") and r.request.method == "POST") as created:
        page.get_by_test_id("create-job").click()
    assert created.value.status == 201, created.value.text()
    sent = created.value.request.post_data_json
    assert sent["precision"] == "fp16" and "quantization" not in sent
    # The new job's page, and the list, badge it fp16.
    expect(page.get_by_test_id("job-page")).to_be_visible()
    expect(page.get_by_test_id("job-page").get_by_test_id("job-tag")).to_have_text("fp16")
    page.get_by_test_id("back-to-jobs").click()
    row = page.locator(f"[data-testid=job-row][data-job-id='{created.value.json()['id']}']")
    expect(row.get_by_test_id("job-tag")).to_have_text("fp16")
