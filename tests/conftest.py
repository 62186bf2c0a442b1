"""Shared fixtures: the reference models, a live `kiln serve` (with Redis when asked) and the API in-process
(on SQLite and on PostgreSQL)."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from onnx import TensorProto, helper, numpy_helper

from service.api.app import create_app
from service.core.security import create_token
from service.core.db import Database
from service.core.settings import Settings
from tests.postgres_server import PostgresServer

ROOT = Path(__file__).resolve().parents[1]
MODELS_DIR = ROOT.parent / "shared" / "models"
# No kernel cache and one process per build unless a test asks (tests/core/codegen/test_kernel_cache.py): a test
# that patches the code generator must see its patch, not an object cached earlier or built in another process.
os.environ["KILN_KERNEL_CACHE"] = "off"
os.environ["KILN_BUILD_JOBS"] = "1"


@pytest.fixture(scope="session")
def models_dir() -> Path:
    if not MODELS_DIR.is_dir():
        pytest.skip("../shared/models is not present")
    return MODELS_DIR


# --- a running Kiln service (real uvicorn + real Celery worker processes) for end-to-end tests ---


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

    def tokens() -> list[str]:  # the admin token comes last, once the worker is up
        return [line.strip() for line in log.read_text().splitlines() if line.startswith("kiln_")]

    wait_until(tokens, timeout_s, "kiln serve printing its admin token")
    token = tokens()[0]
    return LiveService(url, token, data_dir, process, log)


@pytest.fixture(scope="session")
def live_service(tmp_path_factory):
    service = start_service(tmp_path_factory.mktemp("kiln-service") / "data")
    yield service
    service.stop()


@pytest.fixture
def start_kiln(tmp_path):
    """Start more `kiln serve` processes (e.g. with another broker); all are stopped after the test."""
    started: list[LiveService] = []

    def start(env: dict | None = None) -> LiveService:
        started.append(start_service(tmp_path / f"kiln-data-{len(started)}", env))
        return started[-1]
    yield start
    for service in started:
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


@pytest.fixture(scope="session")
def postgres():
    """A private PostgreSQL cluster on a free loopback port (Debian's package, installed by `make test`), with a
    database migrated to head that each test's own database is copied from."""
    try:
        server = PostgresServer("127.0.0.1", free_port()).start()
    except FileNotFoundError as missing:
        pytest.fail(str(missing))
    template = server.create_database("kiln_template")
    database = Database(template)
    database.upgrade_schema()
    database.dispose()
    yield server
    server.remove()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def database_url(request):
    """The service's database for one test: None (the SQLite file in its data dir) or a fresh PostgreSQL one."""
    if request.param == "sqlite":
        yield None
        return
    server = request.getfixturevalue("postgres")
    url = server.create_database(template="kiln_template")
    yield url
    server.drop_database(url.rsplit("/", 1)[1])


# --- the API in-process on a temporary data dir; jobs are captured instead of sent to a broker ---


def tiny_model(seed: int = 0, op: str = "Relu", symbolic: bool = False) -> bytes:
    """Conv -> op -> global average pool: small enough to compile in a second."""
    rng = np.random.default_rng(seed)
    weight = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    shape = ["batch", 3, 8, 8] if symbolic else [1, 3, 8, 8]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node(op, ["c"], ["r"]),
         helper.make_node("GlobalAveragePool", ["r"], ["y"])],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape[:1] + [4, 1, 1])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.fixture
def make_model():
    return tiny_model


def assert_artifact_matches_onnxruntime(artifact, model, seed: int = 0) -> None:
    """The artifact (.tar.gz or extracted folder) run on seeded random inputs matches ONNX Runtime running
    `model` (a path or serialized bytes) on the same inputs, every output."""
    import onnxruntime

    from core.runtime import load

    rng = np.random.default_rng(seed)
    with load(artifact) as module:
        feeds = {t["name"]: rng.standard_normal(t["shape"]).astype(t["dtype"]) for t in module.inputs}
        ours = module.run(feeds)
    session = onnxruntime.InferenceSession(model if isinstance(model, bytes) else str(model),
                                           providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    theirs = dict(zip(names, session.run(names, feeds)))
    assert set(ours) == set(theirs)
    for name in names:
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-4, atol=1e-4, err_msg=name)


@dataclass
class Api:
    client: TestClient
    settings: Settings
    app: object
    queued: list[str] = field(default_factory=list)

    def token(self, user: str) -> str:
        with self.app.state.db.session() as db:
            return create_token(db, user)

    def auth(self, user: str = "alice") -> dict:
        return {"Authorization": f"Bearer {self.token(user)}"}

    def upload(self, headers: dict, data: bytes, name: str = "model.onnx"):
        return self.client.post("/api/v1/models", headers=headers, files={"file": (name, data)})


@pytest.fixture
def api(tmp_path, database_url) -> Api:
    settings = Settings(data_dir=tmp_path / "data", database_url=database_url, max_upload_bytes=2_000_000,
                        events_poll_s=0.05)
    queued: list[str] = []
    app = create_app(settings, enqueue=queued.append)
    with TestClient(app) as client:
        yield Api(client, settings, app, queued)
