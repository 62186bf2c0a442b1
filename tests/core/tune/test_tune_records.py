"""Tuning records: JSON-lines round trip, format/compiler version checks, best(), safe appends."""
from __future__ import annotations

import json
import threading

from core._version import __version__
from core.tune.records import RECORD_VERSION, Record, RecordsDB, append_records, load_records


def rec(workload="w1", gflops=10.0, error=0, index=0, target="native", **kw) -> Record:
    return Record(workload, target, {"tile": index, "pair": [1, 2]}, index, (0.001, 0.0011) if not error else (),
                  error, gflops, "Conv", **kw)


def test_round_trip(tmp_path):
    path = tmp_path / "r.jsonl"
    originals = [rec(index=1, gflops=5.0, features=(0.5, 1.25), feature_version=1), rec(index=2, error=4, gflops=0.0)]
    append_records(path, originals)
    back = list(load_records(path))
    assert [(r.workload, r.index, r.error_no, r.config, r.costs, r.features) for r in back] == \
        [(r.workload, r.index, r.error_no, r.config, r.costs, r.features) for r in originals]
    assert all(json.loads(line)["v"] == RECORD_VERSION for line in path.read_text().splitlines())


def test_versions_and_torn_lines_are_skipped(tmp_path):
    path = tmp_path / "r.jsonl"
    append_records(path, [rec(gflops=1.0)])
    future = json.loads(rec(gflops=99.0).to_json())
    future["v"] = RECORD_VERSION + 1  # a newer format: not understood, not used
    with open(path, "a") as f:
        f.write(json.dumps(future) + "\n")
        f.write(rec(gflops=50.0, compiler_version="0.0.1-old").to_json() + "\n")  # another compiler's
        f.write('{"v": 1, "workload": "w1", "targ')  # a writer killed mid-line
    append_records(path, [rec(gflops=2.0, index=3)])  # starts on a fresh line despite the torn one
    db = RecordsDB(path)
    assert len(db) == 2 and db.skipped == 1
    assert db.best("w1", "native").gflops == 2.0
    assert db.best("w1", "x86-64-v4") is None and db.best("w2", "native") is None
    assert RecordsDB(path, compiler_version="0.0.1-old").best("w1", "native").gflops == 50.0
    assert db.compiler_version == __version__


def test_best_ignores_errors_and_add_persists(tmp_path):
    db = RecordsDB(tmp_path / "sub" / "r.jsonl")
    db.add([rec(gflops=0.0, error=7, index=1), rec(gflops=3.0, index=2), rec(gflops=4.0, index=4)])
    assert db.best("w1", "native").index == 4
    again = RecordsDB(tmp_path / "sub" / "r.jsonl")
    assert again.best("w1", "native").index == 4 and len(again) == 3
    assert RecordsDB(None).best("w1", "native") is None  # in-memory only


def test_best_takes_medians_and_keeps_a_default_within_the_noise():
    default = {"tile": 0, "pair": [1, 2]}
    db = RecordsDB()
    db.add([rec(index=0, gflops=100.0), rec(index=1, gflops=130.0), rec(index=1, gflops=90.0), rec(index=1, gflops=95.0),
            rec(index=2, gflops=102.0), rec(index=0, gflops=98.0)])
    db.add([rec(index=3, gflops=104.0), rec(index=2, gflops=101.0)])
    # config 1's lucky 130 is outvoted by its other timings; config 3, timed once, does not compete with
    # configs timed again; config 2 (median 101.5) beats the default (median 99) by 2.5%
    assert db.best("w1", "native").index == 2 and db.best("w1", "native").gflops == 101.5
    assert db.best("w1", "native", default, min_gain=0.05).index == 0  # 2.5% is within a 5% margin
    assert db.best("w1", "native", default, min_gain=0.01).index == 2
    assert db.best("w1", "native", {"tile": 9, "pair": [1, 2]}, min_gain=0.5).index == 2  # default never measured
    assert [r.index for r in db.top("w1", "native", 2)] == [1, 3]  # by fastest single timing, each config once


def test_concurrent_appends_keep_whole_lines(tmp_path):
    path = tmp_path / "r.jsonl"

    def writer(w: int) -> None:
        for k in range(20):
            append_records(path, [rec(workload=f"w{w}", index=k, features=tuple(range(50)), feature_version=1)] * 3)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = path.read_text().splitlines()
    assert len(lines) == 4 * 20 * 3
    assert all(Record.from_json(line) is not None for line in lines)


def test_others_gives_transfer_history(tmp_path):
    db = RecordsDB(None)
    db.add([rec("w1", features=(1.0,), feature_version=1), rec("w2", features=(2.0,), feature_version=1),
            rec("w3", features=(3.0,), feature_version=0), rec("w4", target="aarch64", features=(1.0,), feature_version=1)])
    assert set(db.others("w1", "native", "Conv", 1)) == {"w2"}
