"""Measuring devices run one batch format the same way natively and under qemu-aarch64 (hostile kernels included),
and the remote runner tunes through them: a lost batch is sent again, devices that never answer fail the tuning
with a clear error, and each candidate's result is taken once."""
from __future__ import annotations

import base64
import json
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest

from core.target import get_target
from core.tune import TuningOptions
from tests.backend_calls import tune_graph, measuring_device
from core.tune.measure import MeasureErrorNo
from core.tune.measuring_device import EmulatedDevice, NativeDevice
from core.tune.remote import MeasuringDevicesLost, RemoteMeasurement

N = 64
KERNELS = {
    "ok": "for (int i = 0; i < N; i++) y[i] = 2 * x[i];",
    "crash": "volatile float *p = 0; p[1] = x[0];",
    "hang": "volatile long s = 0; for (;;) s++;",
    "wrong": "for (int i = 0; i < N; i++) y[i] = 2 * x[i] + 1;",
}
SIGNATURE = {"params": [{"name": "x", "shape": [N], "dtype": "float32"}, {"name": "y", "shape": [N], "dtype": "float32"}],
             "num_inputs": 1, "num_outputs": 1}


def hostile_library(compiler: str, folder: Path) -> bytes:
    """Kiln's kernel calling convention and signature table, with a crashing, a hanging and a wrong kernel."""
    table = json.dumps([{"name": k, **SIGNATURE} for k in KERNELS])
    src = "#define N %d\nconst char kiln_kernels_json[] = %s;\n" % (N, json.dumps(table))
    src += "".join(f"void {k}(float *x, float *y) {{ {body} }}\n" for k, body in KERNELS.items())
    (folder / "bad.c").write_text(src)
    subprocess.run([compiler, "-O1", "-shared", "-fPIC", "-o", str(folder / "bad.so"), str(folder / "bad.c")], check=True)
    return (folder / "bad.so").read_bytes()


def batch_of(lib: bytes, names: list[str], timeout_s: float) -> dict:
    def entry(cid: str, name: str) -> dict:
        return {"id": cid, "name": name, "file": "bad.so", "signature": {"name": name, **SIGNATURE},
                "lib": base64.b64encode(zlib.compress(lib)).decode()}

    return {"batch_id": "b1", "kind": "x", "reference": entry("ref", "ok"),
            "candidates": [entry(f"c{k}", n) for k, n in enumerate(names)],
            "seed": 0, "threads": 0, "repeat": 2, "min_repeat_ms": 1.0, "timeout_s": timeout_s, "constant_inputs": []}


@pytest.mark.parametrize("kind", ["x86-64-v3", "aarch64"])
def test_one_batch_format_runs_natively_and_under_emulation(kind, tmp_path):
    compiler = "cc" if kind.startswith("x86") else "aarch64-linux-gnu-gcc"
    if shutil.which(compiler) is None:
        pytest.fail(f"{compiler} is not installed: run scripts/system-deps.sh")
    device = measuring_device(kind)
    assert isinstance(device, NativeDevice if kind.startswith("x86") else EmulatedDevice)
    # Natively the timeout covers starting the measuring process; under emulation it is EMULATION_SLOWDOWN times longer.
    timeout_s = 2.0 if isinstance(device, NativeDevice) else 0.3
    answer = device.measure(batch_of(hostile_library(compiler, tmp_path), ["ok", "crash", "wrong", "hang", "ok"], timeout_s))
    results = answer["results"]
    assert list(results) == ["c0", "c1", "c2", "c3", "c4"]
    for ok in ("c0", "c4"):
        assert len(results[ok]["costs"]) == 2 and all(c > 0 for c in results[ok]["costs"])
    assert results["c1"]["error"] == MeasureErrorNo.RUNTIME_DEVICE and "SIGSEGV" in results["c1"]["msg"]
    assert results["c2"]["error"] == MeasureErrorNo.WRONG_ANSWER
    assert results["c3"]["error"] == MeasureErrorNo.RUN_TIMEOUT
    assert answer["emulated"] is isinstance(device, EmulatedDevice)
    if answer["emulated"]:
        assert "timings are not meaningful" in answer["note"]


class DeviceTransport:
    """Batches measured in this process by `device`; the first sending of each batch id in `drop` is lost."""

    def __init__(self, device=None, drop: tuple[str, ...] = ()):
        self.device, self.drop = device, set(drop)
        self.sent: list[str] = []
        self.batches: dict[str, dict] = {}

    def send(self, batch_id: str, batch: dict) -> None:
        self.sent.append(batch_id)
        self.batches[batch_id] = batch

    def receive(self, batch_id: str, timeout_s: float):
        if self.device is None:
            return None
        if batch_id in self.drop:
            self.drop.discard(batch_id)
            return None
        return {**self.device.measure(self.batches[batch_id]), "worker": "in-process"}

    def describe(self) -> str:
        return "in-process"


@pytest.fixture(scope="module")
def rpi5_graph(make_tiny_cnn):
    from core.frontend import import_onnx
    from tests.backend_calls import optimize

    return optimize(import_onnx(make_tiny_cnn(two_identical=False)), 3, get_target("rpi5"))


def test_tuning_for_rpi5_measured_remotely_records_each_candidate_once(rpi5_graph, tmp_path):
    target = get_target("rpi5")
    transport = DeviceTransport(measuring_device("rpi5"), drop=("job-1-2",))
    remote = RemoteMeasurement(transport, "rpi5", "job-1", batch_timeout_s=5.0, candidates_per_batch=2)
    records = tmp_path / "records.jsonl"
    outcome = tune_graph(rpi5_graph, target, TuningOptions(trials=4, batch_size=4, records=str(records), remote=remote,
                                                             min_repeat_ms=1.0, build_workers=1))
    measured = outcome.report["measurement"]
    assert measured["emulated"] and "not meaningful" in measured["note"]
    assert measured["resent"] == 1 and measured["lost"] == 0 and transport.sent.count("job-1-2") == 2
    assert outcome.report["trials"] == measured["candidates"] > 0
    recs = [json.loads(line) for line in records.read_text().splitlines()]
    keys = [(r["workload"], json.dumps(r["config"], sort_keys=True)) for r in recs]
    assert len(keys) == len(set(keys)) == outcome.report["trials"]
    assert all(r["target"] == "rpi5" for r in recs)
    assert any(r["error"] == 0 and r["gflops"] > 0 for r in recs)

    from core.report.html import render_html

    page = render_html({"tuning": outcome.report})  # the report page says where, and how, the timings were taken
    assert "Measured remotely on rpi5 (emulated: qemu-aarch64" in page and "1 sent again, 0 lost" in page
    assert "timings are not meaningful" in page


def test_tuning_fails_clearly_when_no_device_answers(rpi5_graph, tmp_path):
    transport = DeviceTransport(None)
    remote = RemoteMeasurement(transport, "rpi5", "job-2", batch_timeout_s=0.1)
    with pytest.raises(MeasuringDevicesLost, match="no device measuring rpi5 code answered .*unanswered twice"):
        tune_graph(rpi5_graph, get_target("rpi5"), TuningOptions(trials=2, batch_size=2, records=str(tmp_path / "r.jsonl"),
                                                                  remote=remote, build_workers=1))
    assert transport.sent == ["job-2-1", "job-2-1"]
