"""One error body on every route: `{"detail": {"code", "message", ...}}`, whatever raised it."""
from __future__ import annotations

import pytest
from onnx import TensorProto, helper


def _shape(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, dict) and detail["code"] == code and isinstance(detail["message"], str), detail
    assert detail["message"]
    return detail


def test_every_kind_of_refusal_has_the_same_shape(api, make_model):
    headers = api.auth()
    client = api.client
    _shape(client.get("/api/v1/models"), 401, "unauthorized")
    _shape(client.get("/api/v1/models/nope", headers=headers), 404, "not_found")
    _shape(client.get("/api/v1/no-such-route", headers=headers), 404, "not_found")
    _shape(client.get("/api/v1/no-such-route"), 401, "unauthorized")  # without a token nothing is learned
    _shape(client.put("/api/v1/targets", headers=headers), 405, "method_not_allowed")
    _shape(client.post("/api/v1/models", headers=headers, content=b"x"), 415, "unsupported_media_type")
    _shape(api.upload(headers, b""), 422, "invalid_request")
    _shape(api.upload(headers, make_model(op="Bernoulli")), 422, "unsupported_op")
    model = api.upload(headers, make_model()).json()
    _shape(client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"], "target": "sparc"}),
           422, "invalid_request")
    pydantic = _shape(client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"], "opt_level": 9}),
                      422, "invalid_request")
    assert "opt_level" in pydantic["message"] and pydantic["errors"][0]["loc"][-1] == "opt_level"
    _shape(client.post("/api/v1/jobs", headers={**headers, "Content-Type": "application/json"}, content=b"{oops"),
           422, "invalid_request")
    job = client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"]}).json()
    _shape(client.get(f"/api/v1/jobs/{job['id']}/artifact", headers=headers), 409, "conflict")
    _shape(client.delete(f"/api/v1/models/{model['id']}", headers=headers), 409, "conflict")


def test_a_job_for_a_target_lists_every_op_it_cannot_compile(api):
    """TopK and CumSum compile on CPUs but not on cuda: POST /jobs refuses before anything is queued."""
    k = helper.make_tensor("k", TensorProto.INT64, [1], [2])
    axis = helper.make_tensor("a", TensorProto.INT64, [], [1])
    graph = helper.make_graph(
        [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1), helper.make_node("CumSum", ["v", "a"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [2, 2])], [k, axis])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    headers = api.auth()
    uploaded = api.upload(headers, model.SerializeToString())
    assert uploaded.status_code == 201 and {"TopK", "CumSum"} <= set(uploaded.json()["op_types"])
    refused = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": uploaded.json()["id"], "target": "cuda"})
    detail = _shape(refused, 422, "unsupported_on_target")
    assert detail["target"] == "cuda"
    assert [o["op"] for o in detail["unsupported_ops"]] == ["CumSum", "TopK"]
    assert detail["message"].startswith("target cuda cannot compile these ops: CumSum, TopK")
    assert api.queued == []
    cpu = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": uploaded.json()["id"], "target": "native"})
    assert cpu.status_code == 201 and api.queued == [cpu.json()["id"]]
    targets = {t["name"]: t for t in api.client.get("/api/v1/targets", headers=headers).json()}
    assert "TopK" in targets["cuda"]["unsupported_ops"] and targets["native"]["unsupported_ops"] == []


@pytest.mark.parametrize("opset", [29, 40])
def test_an_opset_newer_than_supported_is_refused_clearly(api, opset):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    detail = _shape(api.upload(api.auth(), model.SerializeToString()), 422, "unsupported_opset")
    assert f"opset {opset}" in detail["message"] and "newest Kiln supports (28)" in detail["message"]


def test_openapi_declares_the_bearer_scheme_and_serves_docs_without_a_cdn(api):
    schema = api.client.get("/openapi.json").json()
    assert schema["components"]["securitySchemes"]["bearer"] == {
        "type": "http", "scheme": "bearer", "description": schema["components"]["securitySchemes"]["bearer"]["description"]}
    assert schema["paths"]["/api/v1/jobs"]["post"]["security"] == [{"bearer": []}]
    assert "security" not in schema["paths"]["/api/v1/health"]["get"]
    for page in ("/docs", "/redoc"):
        html = api.client.get(page).text
        assert "cdn" not in html.lower() and "https://" not in html, page
    assert api.client.get("/docs-assets/swagger-ui-bundle.js").status_code == 200
    assert api.client.get("/docs-assets/redoc.standalone.js").status_code == 200
