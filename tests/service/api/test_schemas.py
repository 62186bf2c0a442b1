"""Request schemas: their own checks (target names, input dimensions) and how the API answers them."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from core.target import get_target
from service.api.schemas.jobs import JobCreate
from service.api.schemas.refusal import REFUSED, refusal_detail


def test_the_target_is_resolved_once_and_stored_as_written():
    body = JobCreate.model_validate({"model_id": "m", "target": "cuda -arch=sm_90"})
    assert body.target == "cuda -arch=sm_90"
    assert body.resolved_target == get_target("cuda -arch=sm_90")
    assert JobCreate.model_validate({"model_id": "m"}).resolved_target.name == "native"


@pytest.mark.parametrize("fields,message", [
    ({"target": "sparc"}, "unknown target 'sparc'; known targets: native"),
    ({"target": "cuda arch"}, "bad target option 'arch'"),
    ({"input_shapes": {"x": [1, 0], "y": [-2]}}, "input_shapes['x']: dimensions must be positive"),
])
def test_schema_checks_are_refusals_with_the_message(fields, message):
    with pytest.raises(ValidationError) as caught:
        JobCreate.model_validate({"model_id": "m", **fields})
    errors = caught.value.errors()
    assert [e["type"] for e in errors] == [REFUSED] and errors[0]["msg"].startswith(message)
    assert refusal_detail(errors) == errors[0]["msg"]


def test_refusals_are_a_message_unless_pydantic_refused_too():
    refusal = {"type": REFUSED, "msg": "no"}
    assert refusal_detail([refusal, refusal, {"type": REFUSED, "msg": "never"}]) == "no; never"
    assert refusal_detail([refusal, {"type": "less_than_equal", "msg": "Input should be less than or equal to 3"}]) is None
    assert refusal_detail([]) is None


def test_the_api_answers_a_refusal_as_its_message_and_pydantic_errors_with_their_list(api, make_model):
    headers = api.auth()
    model = api.upload(headers, make_model()).json()
    refused = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"], "target": "sparc"})
    assert refused.status_code == 422 and refused.json()["detail"]["message"].startswith("unknown target 'sparc'")
    assert refused.json()["detail"]["code"] == "invalid_request"
    both = api.client.post("/api/v1/jobs", headers=headers,
                           json={"model_id": model["id"], "opt_level": 7, "input_shapes": {"x": [0, 3, 8, 8]}})
    assert both.status_code == 422
    detail = both.json()["detail"]
    assert sorted(e["loc"][-1] for e in detail["errors"]) == ["input_shapes", "opt_level"]
    assert detail["code"] == "invalid_request" and "opt_level" in detail["message"] and "input_shapes" in detail["message"]
    anonymous = api.client.post("/api/v1/jobs", json={"model_id": model["id"], "target": "sparc"})
    assert anonymous.status_code == 401  # no token: nothing about the request is checked first
    assert api.queued == []
