"""Starts a real `kiln serve` (API + embedded Celery worker) on a free loopback port for the service benchmarks."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import httpx

ROOT = Path(__file__).resolve().parents[1]


def start_serve(data_dir: Path, *, concurrency: int = 1, env: Optional[dict] = None,
                timeout_s: float = 60) -> tuple[subprocess.Popen, str, str]:
    """The server process, its URL and the admin token it printed on first start."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log_path = data_dir.parent / "serve.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--port", str(port), "--data-dir",
                                 str(data_dir), "--concurrency", str(concurrency), "--log-level", "warning"],
                                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:  # up, and the first token printed (a thread prints it once the worker is ready)
        try:
            if (httpx.get(url + "/api/v1/health", timeout=1).status_code == 200
                    and any(line.startswith("kiln_") for line in log_path.read_text().splitlines())):
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"kiln serve did not come up:\n{log_path.read_text()}")
        time.sleep(0.1)
    token = next(line.strip() for line in log_path.read_text().splitlines() if line.startswith("kiln_"))
    return proc, url, token
