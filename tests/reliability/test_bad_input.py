"""Bad input gets a clear 4xx and leaves nothing behind: no model folder, no job row, no temp file; the API stays up."""
from __future__ import annotations

import base64
import sys
from pathlib import Path

import pytest
from sqlalchemy import func, select

from service.api import preflight, uploads
from service.core.settings import Settings
from service.core.tables import Job, Model

sys.path.insert(0, str(Path(__file__).parent))
import hostile_models as hostile  # noqa: E402


def assert_nothing_left(api, models: int = 0) -> None:
    with api.app.state.db.session() as db:
        assert db.scalar(select(func.count()).select_from(Job)) == 0, "a job row was left"
        assert db.scalar(select(func.count()).select_from(Model)) == models, "a model row was left"
    assert list(api.settings.tmp_dir.iterdir()) == [], "a temporary file was left"
    assert len(list(api.settings.models_dir.iterdir())) == models, "a model folder was left"
    assert api.client.get("/api/v1/health").status_code == 200  # and the server is still up


def _detail(response) -> dict:
    detail = response.json()["detail"]  # one shape on every route: {"code", "message", ...}
    assert isinstance(detail["code"], str) and isinstance(detail["message"], str), detail
    return detail


FUZZ_FOUND_ELEM_TYPE = (
    "CAg6iQGKDQoBeBIBcyIFU2hhcGVKEAoBcwoBaxIDYmlnIgNNdWxKEwoBeAoDYmlnEgF5IgZFeHBhbmQSB2hvc3RpbGUqGQgCEAdCAWtKEICWmAAA"
    "AAAAAQAAAAAAAABaFAoBeBIPCg0IPRIJCgIQAVIDCOgHIhcK+HkSEgoQCAoDYmlnEgF5IgZFeHBhMUIECgAQEQ==")


# --- uploads that are not a model Kiln may check: (builder, code, words in the message) ---

MODELS = {
    "garbage": (lambda: b"\x00\x01garbage" * 10, "invalid_model", "not an ONNX model"),
    "text": (lambda: b"not protobuf at all", "invalid_model", "not an ONNX model"),
    "no graph": (hostile.no_graph, "invalid_model", "no graph"),
    "checker": (hostile.checker_rejects, "invalid_model", "ONNX checker"),
    "shape inference": (hostile.shape_inference_rejects, "invalid_model", "shape inference"),
    "external ../x": (lambda: hostile.external_initializer("../x.bin"), "invalid_model", "external file"),
    "external absolute": (lambda: hostile.external_initializer("/etc/passwd"), "invalid_model", "external file"),
    "external symlink": (lambda: hostile.external_initializer("link-to-root/etc/shadow"), "invalid_model", "external file"),
    "external in Constant": (hostile.external_in_constant_attribute, "invalid_model", "external file"),
    "external in sparse": (hostile.external_in_sparse_initializer, "invalid_model", "external file"),
    "external in subgraph": (hostile.external_in_subgraph, "invalid_model", "external file"),
    "ConstantOfShape 1e12": (hostile.constant_of_shape_huge, "too_large", "4,000,000,000,000 bytes"),
    "ConstantOfShape of a Constant": (hostile.constant_of_shape_from_constant_node, "too_large", "model too large"),
    "Expand": (hostile.expand_huge, "too_large", "model too large"),
    "Expand of Shape": (hostile.expand_from_shape_huge, "too_large", "model too large"),
    "Tile": (hostile.tile_huge, "too_large", "model too large"),
    "Range": (hostile.range_huge, "too_large", "model too large"),
    "Resize": (hostile.resize_huge, "too_large", "model too large"),
    "huge initializer": (hostile.huge_initializer_declared, "too_large", "tensor 'w' [1000000, 1000000]"),
    "negative dims": (hostile.negative_dims_initializer, "invalid_model", "negative dims"),
    "nested subgraphs": (hostile.deeply_nested_subgraphs, "invalid_model", "nested more than 16 levels"),
    # Found by fuzz_importer.py: an input whose element type no ONNX version defines passed the checker.
    "unknown element type": (lambda: base64.b64decode(FUZZ_FOUND_ELEM_TYPE), "invalid_model", "unknown element type 61"),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_bad_model_is_422_and_leaves_nothing(api, name):
    build, code, words = MODELS[name]
    response = api.upload(api.auth(), build())
    assert response.status_code == 422, response.text
    detail = _detail(response)
    assert detail["code"] == code and words in detail["message"], detail
    assert_nothing_left(api)


def test_truncated_model_is_422(api, make_model):
    response = api.upload(api.auth(), make_model()[:-40])
    assert response.status_code == 422
    assert "not an ONNX model" in _detail(response)["message"]
    assert_nothing_left(api)


# --- the upload itself ---


def test_declared_length_over_the_limit_is_413_before_the_body_is_read(api, monkeypatch):
    def no_folder(*args, **kwargs):
        raise AssertionError("the body was going to be read")

    monkeypatch.setattr(uploads.tempfile, "mkdtemp", no_folder)
    boundary = "b"
    body = f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"m\"\r\n\r\nx\r\n--{boundary}--\r\n"
    headers = {**api.auth(), "Content-Type": f"multipart/form-data; boundary={boundary}",
               "Content-Length": str(3 << 30)}  # a 3 GiB model: over any limit, and over protobuf's 2 GiB
    response = api.client.post("/api/v1/models", headers=headers, content=body.encode())
    assert response.status_code == 413
    assert "larger than the limit of 2,000,000 bytes" in _detail(response)["message"]
    assert_nothing_left(api)


def test_streamed_body_over_the_limit_is_413(api):
    boundary = "kilnboundary"

    def body():  # a generator: sent chunked, with no Content-Length
        yield (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"m.onnx\"\r\n\r\n").encode()
        for _ in range(api.settings.max_upload_bytes // 65536 + 4):
            yield b"\x00" * 65536
        yield f"\r\n--{boundary}--\r\n".encode()

    headers = {**api.auth(), "Content-Type": f"multipart/form-data; boundary={boundary}"}
    response = api.client.post("/api/v1/models", headers=headers, content=body())
    assert response.status_code == 413
    assert "limit" in _detail(response)["message"]
    assert_nothing_left(api)


def test_upload_limit_cannot_exceed_protobufs_2_gib():
    with pytest.raises(ValueError, match="max_upload_bytes"):
        Settings(max_upload_bytes=3 << 30)


@pytest.mark.parametrize("content_type,status,words", [
    ("application/octet-stream", 415, "multipart/form-data"),
    ("multipart/form-data", 415, "multipart/form-data"),  # no boundary
    ("application/json", 415, "multipart/form-data"),
])
def test_wrong_content_type(api, make_model, content_type, status, words):
    response = api.client.post("/api/v1/models", headers={**api.auth(), "Content-Type": content_type},
                               content=make_model())
    assert response.status_code == status and words in _detail(response)["message"]
    assert_nothing_left(api)


def test_malformed_multipart_is_400(api):
    headers = {**api.auth(), "Content-Type": "multipart/form-data; boundary=xyz"}
    response = api.client.post("/api/v1/models", headers=headers, content=b"--xyz\r\nno headers end here" + b"\x00" * 100)
    assert response.status_code in (400, 422)
    assert_nothing_left(api)


@pytest.mark.parametrize("files,words", [({"model": ("m.onnx", b"abc")}, "'file'"), ({"file": ("m.onnx", b"")}, "empty")])
def test_missing_or_empty_file_is_422(api, files, words):
    response = api.client.post("/api/v1/models", headers=api.auth(), files=files)
    assert response.status_code == 422 and words in _detail(response)["message"]
    assert_nothing_left(api)


# --- a checker that dies or hangs costs its child process, never the API ---


def test_checker_killed_by_a_signal_is_422(api, make_model, monkeypatch):
    crash = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]
    monkeypatch.setattr(preflight, "inspect_command", lambda path, limit, with_data_files=False: crash)
    response = api.upload(api.auth(), make_model())
    assert response.status_code == 422
    detail = _detail(response)
    assert detail["code"] == "checker_crashed" and "signal 11" in detail["message"]
    assert_nothing_left(api)


def test_checker_that_hangs_is_stopped(api, make_model, monkeypatch):
    monkeypatch.setattr(api.settings, "preflight_timeout_s", 1.0)
    hang = [sys.executable, "-c", "import time; time.sleep(60)"]
    monkeypatch.setattr(preflight, "inspect_command", lambda path, limit, with_data_files=False: hang)
    response = api.upload(api.auth(), make_model())
    assert response.status_code == 422
    detail = _detail(response)
    assert detail["code"] == "check_timeout" and "within 1 s" in detail["message"]
    assert_nothing_left(api)


def test_tensor_budget_is_a_setting(api, make_model, monkeypatch):
    monkeypatch.setattr(api.settings, "max_tensor_bytes", 1000)  # the tiny model's 4x3x3x3 weight is 432 bytes
    response = api.upload(api.auth(), make_model())
    assert response.status_code == 422
    assert "over the limit of 1,000 bytes per tensor" in _detail(response)["message"]
    assert_nothing_left(api)


# --- job requests ---


@pytest.fixture
def uploaded(api, make_model):
    headers = api.auth()
    model = api.upload(headers, make_model(symbolic=True))
    assert model.status_code == 201
    return headers, model.json()["id"]


JOBS = {
    "unknown target": ({"target": "pdp-11"}, "pdp-11"),
    "absurd trials": ({"tuning": {"trials": 10**12}}, "over this server's limit"),
    "negative trials": ({"tuning": {"trials": -1}}, "greater than or equal to 0"),
    "negative time budget": ({"tuning": {"time_budget_s": -5}}, "greater than 0"),
    "opt level 7": ({"opt_level": 7}, "less than or equal to 3"),
    "unknown field": ({"priority": "high"}, "Extra inputs are not permitted"),
    "huge input shape": ({"input_shapes": {"x": [10**8, 3, 8, 8]}}, "over this server's limit"),
    "zero dimension": ({"input_shapes": {"x": [0, 3, 8, 8]}}, "must be positive"),
    "wrong rank": ({"input_shapes": {"x": [1, 3, 8]}}, "does not fit"),
    "unknown input": ({"input_shapes": {"x": [1, 3, 8, 8], "z": [1]}}, "unknown inputs ['z']"),
    "symbolic not fixed": ({"input_shapes": {}}, "symbolic dimensions"),
}


@pytest.mark.parametrize("name", list(JOBS))
def test_bad_job_request_is_422_and_creates_no_job(api, uploaded, name):
    headers, model_id = uploaded
    fields, words = JOBS[name]
    body = {"model_id": model_id, "input_shapes": {"x": [1, 3, 8, 8]}, **fields}
    response = api.client.post("/api/v1/jobs", headers=headers, json=body)
    assert response.status_code == 422, response.text
    assert words in response.text
    assert api.queued == []
    assert_nothing_left(api, models=1)


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2", b"", b"\xff\xfe", b'{"model_id": 5}'])
def test_malformed_json_is_422(api, uploaded, content):
    headers, _ = uploaded
    response = api.client.post("/api/v1/jobs", headers={**headers, "Content-Type": "application/json"}, content=content)
    assert response.status_code == 422
    assert _detail(response)["message"]
    assert_nothing_left(api, models=1)


def test_someone_elses_model_is_404_and_creates_no_job(api, uploaded):
    _, model_id = uploaded
    response = api.client.post("/api/v1/jobs", headers=api.auth("mallory"),
                               json={"model_id": model_id, "input_shapes": {"x": [1, 3, 8, 8]}})
    assert response.status_code == 404 and model_id in response.json()["detail"]["message"]
    assert_nothing_left(api, models=1)
