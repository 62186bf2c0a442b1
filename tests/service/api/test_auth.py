"""Every API route but /health needs a valid bearer token; users only ever see their own objects."""
from __future__ import annotations

import pytest

from service.core.security import revoke_tokens
from service.api.deps import current_user
from service.core.tables import User

ROUTES = [("GET", "/api/v1/models"), ("POST", "/api/v1/models"), ("GET", "/api/v1/models/x"),
          ("GET", "/api/v1/jobs"), ("POST", "/api/v1/jobs"), ("GET", "/api/v1/jobs/x"), ("DELETE", "/api/v1/jobs/x"),
          ("GET", "/api/v1/jobs/x/events"), ("GET", "/api/v1/jobs/x/artifact"), ("GET", "/api/v1/jobs/x/report"),
          ("GET", "/api/v1/targets")]


@pytest.mark.parametrize("method,path", ROUTES)
def test_no_token_is_401(api, method, path):
    response = api.client.request(method, path)
    assert response.status_code == 401
    assert response.json()["detail"]["code"] == "unauthorized"
    assert "Authorization" in response.json()["detail"]["message"]
    assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("header", ["Bearer kiln_not-a-real-token", "Basic abc", "Bearer "])
def test_bad_token_is_401(api, header):
    response = api.client.get("/api/v1/models", headers={"Authorization": header})
    assert response.status_code == 401


def test_revoked_token_is_401(api):
    headers = api.auth("carol")
    assert api.client.get("/api/v1/models", headers=headers).status_code == 200
    with api.app.state.db.session() as db:
        assert revoke_tokens(db, "carol") == 1
    assert api.client.get("/api/v1/models", headers=headers).status_code == 401


def test_health_needs_no_token(api):
    assert api.client.get("/api/v1/health").json()["status"] == "ok"


def test_tokens_are_stored_hashed(api):
    token = api.token("dave")
    with api.app.state.db.engine.connect() as conn:
        dump = "\n".join(str(row) for row in conn.exec_driver_sql("SELECT * FROM tokens"))
    assert token not in dump and token[5:] not in dump


def test_other_users_objects_are_404(api, make_model):
    alice, bob = api.auth("alice"), api.auth("bob")
    model = api.upload(alice, make_model()).json()
    job = api.client.post("/api/v1/jobs", headers=alice, json={"model_id": model["id"]}).json()
    for path in (f"/api/v1/models/{model['id']}", f"/api/v1/jobs/{job['id']}", f"/api/v1/jobs/{job['id']}/artifact",
                 f"/api/v1/jobs/{job['id']}/report", f"/api/v1/jobs/{job['id']}/events"):
        assert api.client.get(path, headers=bob).status_code == 404, path
    assert api.client.delete(f"/api/v1/jobs/{job['id']}", headers=bob).status_code == 404
    assert api.client.post("/api/v1/jobs", headers=bob, json={"model_id": model["id"]}).status_code == 404
    assert api.client.get("/api/v1/jobs", headers=bob).json() == []
    assert api.client.get("/api/v1/models", headers=bob).json() == []
    # The same bytes uploaded by bob become bob's own model, not a reference to alice's.
    own = api.upload(bob, make_model()).json()
    assert own["id"] != model["id"] and not own["deduplicated"]


def test_targets_with_overridden_user(api):
    api.app.dependency_overrides[current_user] = lambda: User(id=99, name="override")
    try:
        names = [t["name"] for t in api.client.get("/api/v1/targets").json()]
    finally:
        api.app.dependency_overrides.clear()
    assert {"native", "x86-64-v3", "x86-64-v4", "aarch64"} <= set(names)


def test_revoking_a_token_ends_its_open_event_stream(api, make_model):
    """The stream checked the token once: after a revoke it kept sending a queued job's keep-alives for minutes."""
    import threading

    from service.core.tables import Job

    headers = api.auth("dave")
    model = api.upload(headers, make_model()).json()
    job = api.client.post("/api/v1/jobs", headers=headers, json={"model_id": model["id"]}).json()
    answer: dict = {}
    # The test client answers a streaming response once its body has ended: read it in a thread.
    reader = threading.Thread(target=lambda: answer.update(
        text=api.client.get(f"/api/v1/jobs/{job['id']}/events", headers=headers).text), daemon=True)
    reader.start()
    reader.join(1.0)
    assert reader.is_alive()  # the queued job's stream is open
    with api.app.state.db.session() as db:
        assert revoke_tokens(db, "dave") == 1
    reader.join(5.0)
    try:
        assert not reader.is_alive(), "the stream stayed open after its token was revoked"
        assert answer["text"].rstrip().endswith('event: end\ndata: {"status": "unauthorized"}')
    finally:
        if reader.is_alive():  # end the stream the only other way, so that the client can stop
            with api.app.state.db.session() as db:
                db.query(Job).filter(Job.id == job["id"]).delete()
                db.commit()
            reader.join(10)
