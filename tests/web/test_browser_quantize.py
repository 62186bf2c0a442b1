"""The compose form's precision fields in a real browser: int8 shows the calibration fields, the samples are
uploaded (and checked by the server) before the job is created with its quantization options."""
from __future__ import annotations

import numpy as np
import pytest

from tests.core.quantize.models import INPUT, calibration_samples, write_calibration, write_model
from tests.web.test_browser import browser, page, sign_in  # noqa: F401 - the shared browser fixtures

pytestmark = pytest.mark.slow


def test_int8_fields_reach_the_job(page, live_service, tmp_path):  # noqa: F811
    from playwright.sync_api import expect

    model = write_model(tmp_path)
    np.savez(tmp_path / "wrong.npz", **{INPUT: calibration_samples(3).astype(np.float64)})
    good = write_calibration(tmp_path, count=6)

    sign_in(page, live_service)
    page.get_by_test_id("file-input").set_input_files(model)
    expect(page.get_by_test_id("model-info")).to_contain_text("[1, 3, 12, 12]")
    expect(page.get_by_test_id("int8-fields")).to_be_hidden()
    page.get_by_test_id("precision-select").select_option("int8")
    expect(page.get_by_test_id("int8-fields")).to_be_visible()
    page.get_by_test_id("create-job").click()  # refused before any request: no calibration file
    expect(page.get_by_test_id("job-form-error")).to_contain_text("int8 needs calibration samples")

    page.get_by_test_id("calibration-file").set_input_files(tmp_path / "wrong.npz")
    page.get_by_test_id("create-job").click()
    expect(page.get_by_test_id("job-form-error")).to_contain_text("input 'image' is float64, the model takes float32")

    page.get_by_test_id("calibration-file").set_input_files(good)
    page.get_by_test_id("calibration-method").select_option("percentile")
    page.get_by_test_id("per-channel").check()
    page.get_by_test_id("max-error").fill("0.5")
    page.get_by_test_id("keep-float").fill("fc, conv1")
    with page.expect_response(lambda r: r.url.endswith("/api/v1/jobs") and r.request.method == "POST") as created:
        page.get_by_test_id("create-job").click()
    assert created.value.status == 201, created.value.text()
    sent = created.value.request.post_data_json
    assert sent["precision"] == "int8"
    q = sent["quantization"]
    assert q["method"] == "percentile" and q["per_channel"] is True and q["max_error"] == 0.5
    assert q["keep_float"] == ["fc", "conv1"] and len(q["calibration_id"]) == 32
