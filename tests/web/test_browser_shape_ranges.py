"""The compose form's shape fields take ranges in a real browser: "1..4" reaches the job as text, the server
accepts it; a bad range comes back as the server's 422 reason on the form."""
from __future__ import annotations

import pytest

from tests.web.test_browser import browser, page, sign_in  # noqa: F401 - the shared browser fixtures

pytestmark = pytest.mark.slow


def test_a_batch_range_reaches_the_job(page, live_service, tmp_path):  # noqa: F811
    import onnx
    from onnx import TensorProto, helper
    from playwright.sync_api import expect

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])])
    model = tmp_path / "relu_batch.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    sign_in(page, live_service)
    page.get_by_test_id("file-input").set_input_files(model)
    dim = page.get_by_test_id("shape-dim-x-0")
    dim.fill("4..1")
    with page.expect_response(lambda r: r.url.endswith("/api/v1/jobs") and r.request.method == "POST") as refused:
        page.get_by_test_id("create-job").click()
    assert refused.value.status == 422
    expect(page.get_by_test_id("job-form-error")).to_contain_text("above its high end")
    dim.fill("1..4")
    with page.expect_response(lambda r: r.url.endswith("/api/v1/jobs") and r.request.method == "POST") as created:
        page.get_by_test_id("create-job").click()
    assert created.value.status == 201, created.value.text()
    assert created.value.json()["input_shapes"] == {"x": ["1..4", 8]}
