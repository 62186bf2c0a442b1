"""Shared fixtures: where the reference models live, and ONNX Runtime as the reference."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODELS_DIR = ROOT.parent / "shared" / "models"


@pytest.fixture(scope="session")
def models_dir() -> Path:
    if not MODELS_DIR.is_dir():
        pytest.skip("../shared/models is not present")
    return MODELS_DIR


# --- a running Kiln service (real uvicorn + real Celery worker processes) for end-to-end tests ---

import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(check, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise TimeoutError(f"{what} did not happen within {timeout_s} s")


@dataclass
class LiveService:
    url: str
    token: str
    data_dir: Path
    process: subprocess.Popen
    log: Path

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


def start_service(data_dir: Path, env: dict | None = None, timeout_s: float = 60) -> LiveService:
    """`kiln serve` with its embedded worker on a free loopback port; the admin token is read from its output."""
    import httpx

    port = free_port()
    log = data_dir.parent / f"{data_dir.name}-serve.log"
    out = open(log, "w")
    process = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--port", str(port), "--data-dir",
                                str(data_dir), "--log-level", "warning"], stdout=out, stderr=subprocess.STDOUT,
                               cwd=ROOT, env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"kiln serve exited with {process.returncode}:\n{log.read_text()}")
        try:
            return httpx.get(url + "/api/v1/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(healthy, timeout_s, "kiln serve answering /api/v1/health")
    lines = log.read_text().splitlines()
    token = next(line.strip() for line in lines if line.startswith("kiln_"))
    return LiveService(url, token, data_dir, process, log)


@pytest.fixture(scope="session")
def live_service(tmp_path_factory):
    service = start_service(tmp_path_factory.mktemp("kiln-service") / "data")
    yield service
    service.stop()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory):
    """A private redis-server on a free loopback port (Debian's package, installed by `make test`)."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.fail("redis-server is not installed: run `make test` (it installs it) or apt-get install redis-server")
    port = free_port()
    process = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                "--dir", str(tmp_path_factory.mktemp("redis"))], stdout=subprocess.DEVNULL)

    def up() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    wait_until(up, 10, "redis-server accepting connections")
    yield f"redis://127.0.0.1:{port}/0"
    process.terminate()
    process.wait(timeout=10)
