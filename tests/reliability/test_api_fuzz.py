"""Schemathesis against the OpenAPI schema: generated requests never get a 5xx, and none gets in without a token."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402

from service.api.app import create_app  # noqa: E402
from service.core.security import create_token  # noqa: E402
from service.core.settings import Settings  # noqa: E402


# Built at import: schemathesis generates one test per operation from a schema that must exist then.
_DATA = Path(tempfile.mkdtemp(prefix="kiln-fuzz-"))
APP = create_app(Settings(data_dir=_DATA / "data", max_upload_bytes=100_000, uploads_per_minute=10_000,
                          jobs_per_minute=10_000, max_active_jobs=10_000), enqueue=lambda job_id: None)
with APP.state.db.session() as _db:
    TOKEN = create_token(_db, "fuzzer")
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@pytest.fixture(scope="module", autouse=True)
def _remove_data():
    yield
    APP.state.db.dispose()
    shutil.rmtree(_DATA, ignore_errors=True)


FUZZ = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))


@schema.parametrize()
@FUZZ
def test_no_server_errors(case):
    case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"},
                           checks=[not_a_server_error])


@schema.parametrize()
@FUZZ
def test_auth_enforced(case):
    case.headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
    response = case.call()
    assert response.status_code < 500
    if case.path != "/api/v1/health":
        # 405: schemathesis also tries methods an operation does not have; refused before auth, nothing let in.
        assert response.status_code in (401, 405), (case.method, case.path, response.status_code, response.text, case.headers, case.body)
