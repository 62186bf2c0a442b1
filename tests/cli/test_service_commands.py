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


def test_token_revoke_by_id_revokes_that_one_and_by_name_all_of_a_users(tmp_path):
    data = str(tmp_path / "data")
    first = _kiln("token", "create", "fay", "--data-dir", data).stdout.strip().splitlines()[-1]
    second = _kiln("token", "create", "fay", "--data-dir", data).stdout.strip().splitlines()[-1]
    listed = _kiln("token", "list", "--data-dir", data).stdout.splitlines()
    assert [line.split()[:3] for line in listed] == [["1", "fay", first[:12] + "..."], ["2", "fay", second[:12] + "..."]]
    with TestClient(create_app(Settings(data_dir=tmp_path / "data"), enqueue=lambda job_id: None)) as client:
        def works(token):
            return client.get("/api/v1/models", headers={"Authorization": f"Bearer {token}"}).status_code == 200

        one = _kiln("token", "revoke", "--id", "1", "--data-dir", data)
        assert one.returncode == 0 and "revoked token 1 of 'fay'" in one.stdout
        assert not works(first) and works(second)
        again = _kiln("token", "revoke", "--id", "1", "--data-dir", data)
        assert again.returncode == 2 and again.stderr.strip() == \
            "kiln: error: no active token with id 1 (see `kiln token list`)"
        both = _kiln("token", "revoke", "fay", "--id", "2", "--data-dir", data)
        assert both.returncode == 2 and len(both.stderr.strip().splitlines()) == 1
        assert works(second)
        everyone = _kiln("token", "revoke", "fay", "--data-dir", data)
        assert "revoked 1 token(s) of 'fay': all of that user's tokens" in everyone.stdout and not works(second)
    assert "revoked" in _kiln("token", "list", "--data-dir", data).stdout.splitlines()[1]


def test_first_token_box_has_the_token_alone_on_its_line_and_how_to_make_another(tmp_path):
    from cli.service_commands import first_token_box

    box = first_token_box("kiln_abc", "http://127.0.0.1:8000", tmp_path).splitlines()
    assert box[0] == box[-1] and set(box[0]) == {"+", "-"}
    assert "kiln_abc" in box and all(len(line) == len(box[0]) for line in box if line != "kiln_abc")
    assert any("kiln token create NAME [--admin]" in line for line in box)


def test_worker_measure_refuses_a_kind_this_machine_cannot_measure_in_one_line(tmp_path):
    from cli.service_commands import measuring_queues
    from core.backends import get_backend
    from core.target import get_target
    from core.backends import resolve
    from service.core.queues import measure_queue

    refused = [("nosuch", "unknown target 'nosuch'")]
    if not get_backend(get_target("cuda")).has_device(get_target("cuda")):  # else that worker would start and serve
        refused.append(("cuda", "cannot measure cuda code"))
    for kind, says in refused:
        result = _kiln("worker", "--measure", kind, "--data-dir", str(tmp_path / "data"))
        assert result.returncode != 0 and says in result.stderr and len(result.stderr.strip().splitlines()) == 1
    # rpi5 here: under qemu-aarch64 (an Arm host measures it natively); the worker serves its queue only.
    assert measuring_queues(["rpi5", "rpi5"]) == [measure_queue(*resolve("rpi5"))] == ["measure.rpi5"]
