"""The compose form's validation fields in a real browser: mode, tolerance and real inputs (.npz uploaded and
checked by the server before the job is created)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.web.test_browser import browser, page, sign_in  # noqa: F401 - the shared browser fixtures

pytestmark = pytest.mark.slow


def test_validation_fields_reach_the_job(page, live_service, tmp_path):  # noqa: F811
    import onnx
    from onnx import TensorProto, helper
    from playwright.sync_api import expect

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])])
    model = tmp_path / "relu_validation.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    np.savez(tmp_path / "wrong.npz", x=np.zeros((2, 8), np.float64))
    np.savez(tmp_path / "good.npz", x=np.ones((3, 2, 8), np.float32))

    sign_in(page, live_service)
    page.get_by_test_id("file-input").set_input_files(model)
    expect(page.get_by_test_id("model-info")).to_contain_text("[2, 8]")
    page.get_by_test_id("tolerance-input").fill("1e-3,x")
    page.get_by_test_id("create-job").click()  # refused before any request
    expect(page.get_by_test_id("job-form-error")).to_contain_text("ATOL or ATOL,RTOL")

    page.get_by_test_id("tolerance-input").fill("1e-3")
    page.get_by_test_id("validate-select").select_option("warn")
    page.get_by_test_id("validation-inputs").set_input_files(tmp_path / "wrong.npz")
    page.get_by_test_id("create-job").click()
    expect(page.get_by_test_id("job-form-error")).to_contain_text("input 'x' is float64, the model takes float32")

    page.get_by_test_id("validation-inputs").set_input_files(tmp_path / "good.npz")
    with page.expect_response(lambda r: r.url.endswith("/api/v1/jobs") and r.request.method == "POST") as created:
        page.get_by_test_id("create-job").click()
    assert created.value.status == 201, created.value.text()
    sent = created.value.request.post_data_json["validation"]
    assert sent["mode"] == "warn" and sent["tolerance"] == [0.001] and len(sent["inputs_id"]) == 32
