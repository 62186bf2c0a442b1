"""Records say where they were measured: a job timed on real devices neither counts, warm-starts from nor builds
with emulated (qemu) records of the same target, an emulated job builds its best emulated config, a job answered
by both kinds is native, and records files from before (no `measured`) load as native."""
from __future__ import annotations

import json
import zlib

import numpy as np
import onnxruntime as ort
import pytest

import core
from core.target import get_target
from core.tune import TuningOptions
from tests.backend_calls import tune_graph
from core.tune.measuring_device import NativeDevice
from core.tune.records import EMULATED, NATIVE, RecordsDB, load_records
from core.tune.remote import RemoteMeasurement
from core.tune.session import MIN_GAIN

FAKE_QEMU_COST_S = 1e-12  # a meaningless timing, far faster than any real one: it would win any comparison


class FakeDeviceTransport:
    """Batches measured in this process on this host; the answers of the batches whose number is in `emulated`
    come as an emulated device's do (`"emulated": true`, its timings made up), the others as a real device's."""

    def __init__(self, emulated: "set[int] | str"):
        self.device = NativeDevice(get_target("native"))
        self.emulated = emulated
        self.batches: dict[str, dict] = {}

    def _is_emulated(self, batch_id: str) -> bool:
        return self.emulated == "all" or int(batch_id.rsplit("-", 1)[1]) in self.emulated

    def send(self, batch_id: str, batch: dict) -> None:
        self.batches[batch_id] = batch

    def receive(self, batch_id: str, timeout_s: float) -> dict:
        answer = {**self.device.measure(self.batches[batch_id]), "worker": "in-process"}
        if not self._is_emulated(batch_id):
            return answer
        made_up = {cid: ({"costs": [FAKE_QEMU_COST_S * (1 + zlib.crc32(cid.encode()) % 5)] * 2} if "costs" in r else r)
                   for cid, r in answer["results"].items()}
        return {**answer, "device": "native (emulated: fake qemu)", "emulated": True, "results": made_up}

    def describe(self) -> str:
        return "in-process"


def remote_options(records, emulated, key: str, trials: int = 6) -> TuningOptions:
    remote = RemoteMeasurement(FakeDeviceTransport(emulated), "native", key, batch_timeout_s=30.0,
                               candidates_per_batch=2)
    return TuningOptions(trials=trials, batch_size=4, records=str(records), remote=remote, min_repeat_ms=1.0,
                         build_workers=1)


@pytest.fixture(scope="module")
def graph(make_tiny_cnn):
    from core.frontend import import_onnx
    from tests.backend_calls import optimize

    return optimize(import_onnx(make_tiny_cnn(two_identical=False)), 3, get_target("native"))


def _best(records, task, measured):
    return RecordsDB(records).best(task.key, "native", task.space.default.values, MIN_GAIN, measured)


def test_emulated_records_neither_count_nor_win_for_a_native_job(graph, tmp_path):
    records = tmp_path / "records.jsonl"
    emulated = tune_graph(graph, get_target("native"), remote_options(records, "all", "job-e"))
    assert emulated.report["measurement"]["records_measured"] == EMULATED
    assert {r.measured for r in load_records(records)} == {EMULATED}
    tasks = [task for task, _ in emulated.chosen.values()]
    assert len(tasks) == 2
    for task in tasks:  # the emulated job builds its best emulated config (made-up timings: the fastest ever seen)
        best = _best(records, task, EMULATED)
        assert emulated.chosen[task.key][1] == best.config and best.gflops > 1e5
        assert _best(records, task, NATIVE) is None

    native = tune_graph(graph, get_target("native"), remote_options(records, set(), "job-n"))
    report = native.report
    assert report["measurement"]["records_measured"] == NATIVE and report["measurement"]["answers"][EMULATED] == 0
    # The emulated trials are no trials of this job: its whole budget is measured, nothing is a cache hit.
    assert report["trials"] == 6 and report["trials_from_records"] == 0 and report["cache_hits"] == 0
    assert all(t["trials_from_records"] == 0 for t in report["tasks"])
    assert report["records"]["measured"] == {EMULATED: 6, NATIVE: 6}
    for task, entry in zip(tasks, sorted(report["tasks"], key=lambda t: [k.key for k in tasks].index(t["key"]))):
        best = _best(records, task, NATIVE)
        assert native.chosen[task.key][1] == best.config == entry["chosen_config"]
        assert entry["chosen_gflops"] < 1e4 and entry["best_gflops"] < 1e4  # a real timing, never a qemu one

    # A local (native) compile with a budget the emulated records would cover: cache hits from the native ones only.
    again = tune_graph(graph, get_target("native"), TuningOptions(trials=6, records=str(records), build_workers=1))
    assert again.report["trials"] == 0 and again.report["cache_hits"] == 2
    assert all(again.chosen[t.key][1] == _best(records, t, NATIVE).config for t in tasks)


def test_a_job_answered_by_real_and_emulated_devices_is_native(graph, tmp_path):
    records = tmp_path / "records.jsonl"
    # A real device answers the odd batches (the first one included), a qemu worker the even ones.
    outcome = tune_graph(graph, get_target("native"), remote_options(records, set(range(2, 64, 2)), "job-m", trials=8))
    measured = outcome.report["measurement"]
    assert measured["records_measured"] == NATIVE and measured["answers"][NATIVE] and measured["answers"][EMULATED]
    recs = list(load_records(records))
    assert len(recs) == 8 and {r.measured for r in recs} == {NATIVE, EMULATED}  # each record: its answer's kind
    assert all(r.gflops < 1e4 for r in recs if r.measured == NATIVE)
    assert len(outcome.chosen) == 2
    for task, values in outcome.chosen.values():
        assert values == _best(records, task, NATIVE).config  # built from the real device's timings only
    # Once a real device answered, the search saw the qemu answers as failed candidates, not timings to learn from.
    hidden = sum(t["errors"].get("RUNTIME_DEVICE", 0) for t in outcome.report["tasks"])
    assert hidden >= sum(r.measured == EMULATED for r in recs)


def test_an_emulated_job_compiles_its_best_emulated_configs(make_tiny_cnn, tmp_path):
    model = make_tiny_cnn(two_identical=False)
    records = tmp_path / "records.jsonl"
    artifact = core.compile(model, tuning=remote_options(records, "all", "job-c"), benchmark=False)
    tuning = artifact.report["tuning"]
    assert tuning["measurement"]["records_measured"] == EMULATED
    db = RecordsDB(records)
    for entry in tuning["tasks"]:
        best = db.best(entry["key"], "native", None, 0.0, EMULATED)
        assert entry["chosen_config"] is not None and entry["chosen_gflops"] > 1e5  # an emulated record's
        assert best is not None and db.best(entry["key"], "native") is None
    assert sum(k["tuned"] for k in artifact.report["kernels"]) == 2 and artifact.report["validation"]["passed"]
    x = np.random.default_rng(3).standard_normal((1, 8, 16, 16)).astype(np.float32)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    module = artifact.load()
    try:
        np.testing.assert_allclose(module.run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)
    finally:
        module.close()


def test_records_files_without_a_measurement_load_as_native(tmp_path):
    from core.tune.records import Record

    path = tmp_path / "old.jsonl"
    old = json.loads(Record("w1", "rpi5", {"tile": 2}, 2, (1e-3,), 0, 40.0, "Conv").to_json())
    old["v"] = 2
    del old["measured"]  # as Kiln wrote them before records said where they were measured
    emulated = Record("w1", "rpi5", {"tile": 3}, 3, (1e-9,), 0, 4e7, "Conv", measured=EMULATED)
    path.write_text(json.dumps(old) + "\n" + emulated.to_json() + "\n")
    db = RecordsDB(path)
    assert len(db) == 2 and db.as_dict()["measured"] == {EMULATED: 1, NATIVE: 1}
    assert db.best("w1", "rpi5").config == {"tile": 2} and [r.index for r in db.records("w1", "rpi5")] == [2]
    assert db.best("w1", "rpi5", measured=EMULATED).config == {"tile": 3}
    assert [r.index for r in db.top("w1", "rpi5", 5, EMULATED)] == [3]
    featured = Record("w2", "rpi5", {"tile": 1}, 1, (1e-9,), 0, 4e7, "Conv", (0.5,), 1, measured=EMULATED)
    db.add([featured])  # another workload's emulated history: transfer learning for emulated jobs only
    assert db.others("w1", "rpi5", "Conv", 1) == {} and list(db.others("w1", "rpi5", "Conv", 1, EMULATED)) == ["w2"]
    assert json.loads(emulated.to_json())["measured"] == EMULATED
