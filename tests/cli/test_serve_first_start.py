"""`kiln serve`'s first start: the admin token comes last, boxed, after the worker's banner; /health sees the worker."""
from __future__ import annotations

import httpx
import pytest


@pytest.mark.slow
def test_admin_token_is_printed_last_after_the_worker_is_up(start_kiln):
    service = start_kiln()
    lines = service.log.read_text().splitlines()
    token_at = lines.index(service.token)
    banner_at = next(i for i, line in enumerate(lines) if line.startswith("Kiln worker: queues"))
    assert banner_at < token_at
    assert lines[token_at - 3].startswith("+--") and "shown only this once" in lines[token_at - 2]
    assert any("kiln token create NAME [--admin]" in line for line in lines[token_at:token_at + 6])
    health = httpx.get(service.url + "/api/v1/health", timeout=10).json()
    assert health["workers"]["seen"] == 1 and "compile" in health["workers"]["workers"][0]["queues"]
