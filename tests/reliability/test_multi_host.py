"""Several hosts on one machine: the API, two workers, Redis and PostgreSQL each in its own network namespace on
one bridge; a worker host is cut off mid-job and Redis is killed and restarted, and every job still ends once."""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from core import runtime
from service.core import storage
from tests.conftest import ROOT, tiny_model
from tests.postgres_server import PostgresServer

JOBS = 20
DEADLINE_S = 300  # the whole scenario; the test fails with the hosts' logs when a step overruns it
CLONE_NEWNET = 0x40000000
SUBNET = "10.77.0"  # inside private namespaces only: no address of this machine's own network is touched
REDIS_PASSWORD = "kiln-test"  # as in production: Redis refuses other hosts without one (protected mode)
HOSTS = {"api": 2, "w1": 3, "w2": 4, "redis": 5, "pg": 6}


class Network:
    """One namespace per host plus a switch namespace holding the bridge; each host's eth0 is a veth pair's end,
    the other end a port of the bridge (cutting a host off is setting its port down)."""

    def __init__(self):
        self.prefix = f"kiln{os.getpid()}"
        self.switch = f"{self.prefix}-sw"
        self.made: list[str] = []

    def ns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def address(self, host: str) -> str:
        return f"{SUBNET}.{HOSTS[host]}"

    def build(self) -> None:
        def ip(*args: str) -> None:
            subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)

        for name in [self.switch, *map(self.ns, HOSTS)]:
            ip("netns", "add", name)
            self.made.append(name)
            ip("-n", name, "link", "set", "lo", "up")
        ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        ip("-n", self.switch, "link", "set", "br0", "up")
        for host in HOSTS:
            ip("-n", self.switch, "link", "add", f"p-{host}", "type", "veth", "peer", "name", "eth0",
               "netns", self.ns(host))
            ip("-n", self.switch, "link", "set", f"p-{host}", "master", "br0", "up")
            ip("-n", self.ns(host), "addr", "add", f"{self.address(host)}/24", "dev", "eth0")
            ip("-n", self.ns(host), "link", "set", "eth0", "up")

    def link(self, host: str, up: bool) -> None:
        subprocess.run(["ip", "-n", self.switch, "link", "set", f"p-{host}", "up" if up else "down"], check=True)

    def run_in(self, host: str, command: list[str], log: Path, env: dict) -> subprocess.Popen:
        # `ip netns exec` execs the command: the Popen's pid is the server's own.
        return subprocess.Popen(["ip", "netns", "exec", self.ns(host), *command], stdout=open(log, "w"),
                                stderr=subprocess.STDOUT, cwd=ROOT, env={**os.environ, **env})

    def remove(self) -> None:
        for name in reversed(self.made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def client_in(namespace: str) -> tuple[ThreadPoolExecutor, httpx.Client]:
    """An HTTP client whose one thread lives in `namespace` (setns moves only the calling thread), so the test
    reaches the API's address without any route from this machine's own network."""
    libc = ctypes.CDLL(None, use_errno=True)

    def enter() -> None:
        fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns into {namespace}")
        finally:
            os.close(fd)
    return ThreadPoolExecutor(1, initializer=enter), httpx.Client(timeout=30, trust_env=False)  # no proxy


@pytest.fixture
def network():
    if os.geteuid() != 0:
        pytest.skip("`ip netns` needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN)")
    probe = subprocess.run(["ip", "netns", "add", f"kiln{os.getpid()}-probe"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"`ip netns` is not permitted here: {probe.stderr.strip()}")
    subprocess.run(["ip", "netns", "del", f"kiln{os.getpid()}-probe"], capture_output=True)
    net = Network()
    try:
        net.build()
        yield net
    finally:
        net.remove()


@pytest.mark.slow
@pytest.mark.timeout(DEADLINE_S + 120)
def test_jobs_end_once_through_a_cut_worker_and_a_redis_restart(network, tmp_path, fast_sweep):
    deadline = time.monotonic() + DEADLINE_S
    data = tmp_path / "shared-data"  # the volume every host mounts (NFS or a cloud disk between real machines)
    data.mkdir()
    postgres = PostgresServer(network.address("pg"), 5432, prefix=["ip", "netns", "exec", network.ns("pg")])
    redis_command = ["redis-server", "--bind", network.address("redis"), "--port", "6379", "--dir", str(tmp_path),
                     "--requirepass", REDIS_PASSWORD, "--appendonly", "yes", "--appendfsync", "always", "--save", ""]
    processes: dict[str, subprocess.Popen] = {}
    logs = {name: tmp_path / f"{name}.log" for name in ("redis", "api", "w1", "w2")}

    def tails() -> str:
        return "\n".join(f"--- {name}\n{log.read_text()[-3000:]}" for name, log in logs.items() if log.exists())

    def start_redis() -> None:
        processes["redis"] = network.run_in("redis", redis_command, logs["redis"], {})

    redis_url = f"redis://:{REDIS_PASSWORD}@{network.address('redis')}:6379"
    env = {"KILN_DATA_DIR": str(data), "KILN_DATABASE_URL": postgres.url(),  # reached from the namespaces only
           "KILN_BROKER_URL": f"{redis_url}/0", "KILN_RESULT_BACKEND": f"{redis_url}/1",
           "KILN_MAX_ACTIVE_JOBS": "100", **fast_sweep}
    executor, http = None, None
    try:
        postgres.start()
        start_redis()
        created = subprocess.run(["ip", "netns", "exec", network.ns("api"), sys.executable, "-m", "cli.main", "token",
                                  "create", "ci"], capture_output=True, text=True, cwd=ROOT, env={**os.environ, **env},
                                 timeout=120)
        assert created.returncode == 0, created.stderr + created.stdout
        token = created.stdout.strip().splitlines()[-1]
        processes["api"] = network.run_in("api", [sys.executable, "-m", "cli.main", "serve", "--no-worker", "--host",
                                                  network.address("api"), "--port", "8000", "--log-level", "warning"],
                                          logs["api"], env)
        for worker in ("w1", "w2"):
            processes[worker] = network.run_in(worker, [sys.executable, "-m", "cli.main", "worker", "--concurrency",
                                                        "1", "--log-level", "warning"], logs[worker], env)
        executor, http = client_in(network.ns("api"))
        base = f"http://{network.address('api')}:8000/api/v1"
        headers = {"Authorization": f"Bearer {token}"}
        health_failures: list[str] = []

        def call(method: str, path: str, **kwargs) -> httpx.Response:
            return executor.submit(http.request, method, base + path, headers=headers, **kwargs).result()

        broker_seen_down: list[dict] = []

        def healthy() -> bool:
            """The API answers and reaches PostgreSQL (a 503 that says only the broker is down is still up)."""
            try:
                answer = call("GET", "/health").json()
            except (httpx.HTTPError, ValueError) as err:
                health_failures.append(repr(err))
                return False
            if not answer["broker"]["reachable"]:
                broker_seen_down.append(answer["broker"])
            if not answer["database"]["reachable"]:
                health_failures.append(str(answer["database"]))
            return answer["database"]["reachable"]

        def jobs() -> dict[str, dict]:
            assert healthy(), f"the API stopped answering: {health_failures[-1:]}\n{tails()}"
            return {job["id"]: job for job in call("GET", "/jobs").json()}

        def wait(what: str, check) -> object:
            while time.monotonic() < deadline:
                for name, process in processes.items():
                    assert process.poll() is None, f"{name} exited with {process.returncode}\n{tails()}"
                found = check()
                if found:
                    return found
                time.sleep(0.5)
            raise AssertionError(f"{what} did not happen within {DEADLINE_S} s\n{tails()}")

        started = time.monotonic()
        while not (healthy() and not broker_seen_down):
            broker_seen_down.clear()
            assert time.monotonic() - started < 60 and processes["api"].poll() is None, f"no API\n{tails()}"
            time.sleep(0.5)
        health_failures.clear()
        models = {}
        for seed in range(JOBS):  # one model per job: an artifact given to the wrong job fails the comparison
            model = call("POST", "/models", files={"file": (f"tiny{seed}.onnx", tiny_model(seed))}).json()
            job = call("POST", "/jobs", json={"model_id": model["id"], "target": "native"})
            assert job.status_code == 201, job.text
            models[job.json()["id"]] = seed

        # Fault 1: a worker host is cut off in the middle of a job.
        w1 = f"kiln-{processes['w1'].pid}@"

        def running_on_w1() -> list[dict]:
            return [j for j in jobs().values() if j["status"] == "running" and w1 in (j["worker"] or "")]

        for _ in range(5):
            wait("a job running on w1", running_on_w1)
            network.link("w1", up=False)
            time.sleep(1)  # what w1 wrote before the cut has landed; nothing it writes after does
            cut = running_on_w1()
            if cut:
                break
            network.link("w1", up=True)  # it was between two jobs at that instant: heal and cut again
        assert cut, "w1 was never caught running a job"
        cut = cut[0]
        wait("w1's job taken over by w2", lambda: (job := jobs()[cut["id"]])["attempts"] >= 2
             and w1 not in (job["worker"] or ""))

        # Fault 2: Redis killed (the broker and result store of every host) while jobs are still queued.
        wait("a few more jobs done", lambda: sum(j["status"] == "succeeded" for j in jobs().values()) >= 6)
        processes.pop("redis").send_signal(signal.SIGKILL)
        outage_end = time.monotonic() + 5
        while time.monotonic() < outage_end:
            assert len(jobs()) == JOBS  # the API answers from PostgreSQL alone
            time.sleep(0.5)
        assert broker_seen_down, "/health never noticed that Redis was gone"
        start_redis()
        network.link("w1", up=True)  # the partition heals: w1's stale attempt comes back late

        def all_ended() -> bool:
            return all(job["status"] in ("succeeded", "failed", "cancelled") for job in jobs().values())

        wait("every job ended", all_ended)
        time.sleep(3 * float(fast_sweep["KILN_HEARTBEAT_S"]))  # w1's late attempt has had its chance to write
        final = jobs()
        assert health_failures == []
        assert {job["status"] for job in final.values()} == {"succeeded"}, tails()
        assert final[cut["id"]]["attempts"] >= 2

        # Every artifact exactly once, in its own job's folder, and computing its own model; no staging left.
        assert sorted(p.name for p in (data / "jobs").iterdir()) == sorted(final)
        assert [p.name for p in (data / "tmp").glob("job-*")] == []
        rng = np.random.default_rng(1)
        for job_id, seed in models.items():
            folder = data / "jobs" / job_id
            assert sorted(p.name for p in folder.iterdir() if p.name.endswith(".tar.gz")) == [storage.ARTIFACT]
            x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
            got = runtime.load(folder / storage.ARTIFACT).run({"x": x})["y"]
            want = ort.InferenceSession(tiny_model(seed), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"job {job_id} (model {seed})")
        print(f"\nmulti-host: {JOBS} jobs, faults: w1 cut off mid-job (job {cut['id'][:8]}, attempts "
              f"{final[cut['id']]['attempts']}), Redis SIGKILLed for 5 s and restarted; outcomes: "
              f"{sum(j['status'] == 'succeeded' for j in final.values())} succeeded, "
              f"{sum(j['attempts'] > 1 for j in final.values())} ran more than once, "
              f"{time.monotonic() - (deadline - DEADLINE_S):.0f} s")
    finally:
        if http is not None:
            http.close()
            executor.shutdown()
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM if process is not processes.get("redis") else signal.SIGKILL)
        for process in processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        postgres.remove()
