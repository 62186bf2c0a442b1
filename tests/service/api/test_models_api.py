"""POST /models: streamed upload, pre-flight check, deduplication; every bad upload is a 4xx that leaves nothing."""
from __future__ import annotations

import hashlib

import pytest


def _leftovers(api) -> list:
    return list(api.settings.tmp_dir.iterdir())


def test_upload_answers_signature_and_sha(api, make_model):
    data = make_model()
    response = api.upload(api.auth(), data, name="../../etc/evil name.onnx")
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["sha256"] == hashlib.sha256(data).hexdigest()
    assert body["size_bytes"] == len(data)
    assert body["filename"] == "evil name.onnx"  # no path survives
    assert body["inputs"] == [{"name": "x", "shape": [1, 3, 8, 8], "dtype": "float32"}]
    assert body["outputs"][0]["name"] == "y"
    assert (api.settings.models_dir / body["id"] / "model.onnx").read_bytes() == data
    assert _leftovers(api) == []


def test_same_file_twice_is_deduplicated(api, make_model):
    headers = api.auth()
    first = api.upload(headers, make_model()).json()
    again = api.upload(headers, make_model())
    assert again.status_code == 200
    assert again.json()["id"] == first["id"] and again.json()["deduplicated"]
    assert len(api.client.get("/api/v1/models", headers=headers).json()) == 1
    assert _leftovers(api) == []


def test_unsupported_ops_are_all_listed(api, make_model):
    response = api.upload(api.auth(), make_model(op="Bernoulli"))  # random sampling: not compiled
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert detail["code"] == "unsupported_op"
    assert detail["unsupported_ops"] == [{"domain": "ai.onnx", "op": "Bernoulli", "opset": 17}]
    assert "Bernoulli (opset 17)" in detail["message"]
    assert list(api.settings.models_dir.iterdir()) == [] and _leftovers(api) == []


@pytest.mark.parametrize("data,message", [(b"\x00\x01garbage" * 10, "not an ONNX model"),
                                          (b"not protobuf at all", "not an ONNX model")])
def test_not_a_model_is_422(api, data, message):
    response = api.upload(api.auth(), data)
    assert response.status_code == 422
    assert message in response.json()["detail"]["message"]
    assert api.client.get("/api/v1/models", headers=api.auth()).json() == []
    assert _leftovers(api) == []


def test_truncated_model_is_422(api, make_model):
    response = api.upload(api.auth(), make_model()[:-40])
    assert response.status_code == 422
    assert _leftovers(api) == []


def test_too_large_with_content_length_is_413(api):
    response = api.upload(api.auth(), b"\x00" * (api.settings.max_upload_bytes + 100_000))
    assert response.status_code == 413
    assert "limit" in response.json()["detail"]["message"]
    assert _leftovers(api) == []


def test_too_large_streamed_without_content_length_is_413(api):
    limit = api.settings.max_upload_bytes
    boundary = "kilnboundary"

    def body():  # a generator: httpx sends it chunked, with no Content-Length
        yield (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"m.onnx\"\r\n"
               "Content-Type: application/octet-stream\r\n\r\n").encode()
        for _ in range(limit // 65536 + 4):
            yield b"\x00" * 65536
        yield f"\r\n--{boundary}--\r\n".encode()

    headers = {**api.auth(), "Content-Type": f"multipart/form-data; boundary={boundary}"}
    response = api.client.post("/api/v1/models", headers=headers, content=body())
    assert response.status_code == 413
    assert _leftovers(api) == []


def test_wrong_content_type_is_415(api, make_model):
    response = api.client.post("/api/v1/models", headers={**api.auth(), "Content-Type": "application/octet-stream"},
                               content=make_model())
    assert response.status_code == 415
    assert "multipart/form-data" in response.json()["detail"]["message"]


def test_missing_file_field_is_422(api):
    response = api.client.post("/api/v1/models", headers=api.auth(), files={"model": ("m.onnx", b"abc")})
    assert response.status_code == 422
    assert "'file'" in response.json()["detail"]["message"]


def test_empty_file_is_422(api):
    response = api.upload(api.auth(), b"")
    assert response.status_code == 422
    assert "empty" in response.json()["detail"]["message"]


def test_delete_model(api, make_model):
    headers = api.auth()
    model = api.upload(headers, make_model()).json()
    assert api.client.delete(f"/api/v1/models/{model['id']}", headers=headers).status_code == 204
    assert api.client.get(f"/api/v1/models/{model['id']}", headers=headers).status_code == 404
    assert not (api.settings.models_dir / model["id"]).exists()
