"""`kiln token` prints a usable token as its last line; `kiln submit` refuses bad arguments in one line."""
from __future__ import annotations

import subprocess
import sys

from fastapi.testclient import TestClient

from service.api.app import create_app
from service.core.settings import Settings


def _kiln(*args):
    return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, timeout=120)


def test_token_create_last_line_is_a_working_token(tmp_path):
    data = tmp_path / "data"
    result = _kiln("token", "create", "erin", "--data-dir", str(data))
    assert result.returncode == 0, result.stderr
    token = result.stdout.strip().splitlines()[-1]
    assert token.startswith("kiln_") and len(token) > 40
    with TestClient(create_app(Settings(data_dir=data), enqueue=lambda job_id: None)) as client:
        assert client.get("/api/v1/models", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        revoked = _kiln("token", "revoke", "erin", "--data-dir", str(data))
        assert revoked.returncode == 0 and "revoked 1 token" in revoked.stdout
        assert client.get("/api/v1/models", headers={"Authorization": f"Bearer {token}"}).status_code == 401


def test_openapi_documents_the_api(tmp_path):
    with TestClient(create_app(Settings(data_dir=tmp_path), enqueue=lambda job_id: None)) as client:
        assert client.get("/docs").status_code == 200
        paths = client.get("/openapi.json").json()["paths"]
    assert {"/api/v1/models", "/api/v1/jobs", "/api/v1/jobs/{job_id}/events", "/api/v1/jobs/{job_id}/artifact",
            "/api/v1/jobs/{job_id}/report", "/api/v1/targets", "/api/v1/health"} <= set(paths)


def test_submit_without_token_is_one_line(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    result = subprocess.run([sys.executable, "-m", "cli.main", "submit", str(model), "--server", "http://127.0.0.1:9"],
                            capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert result.returncode != 0
    assert result.stderr.strip() == "kiln: error: no API token: pass --token or set KILN_TOKEN"


def test_submit_to_a_dead_server_is_one_line(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    result = _kiln("submit", str(model), "--server", "http://127.0.0.1:9", "--token", "kiln_x")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kiln: error: cannot reach http://127.0.0.1:9")
