"""compile(tuning=...): tunes the tasks, writes records, applies the best configs (tuned kernels still
match ONNX Runtime); compiling again with the same records measures nothing (cache hits = tasks)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort

import core
from core.target import get_target
from core.tune import RecordsDB, TuningOptions
from tests.backend_calls import tune_graph
from core.tune.records import load_records
from core.tune.session import MIN_GAIN


def test_tuned_compile_matches_onnxruntime_and_reuses_records(tmp_path, tiny_model, tiny_graph, tiny_tasks):
    records = tmp_path / "records.jsonl"
    seen = []
    artifact = core.compile(tiny_model, tuning={"trials": 6, "records": str(records), "batch_size": 3,
                                                "progress": lambda done, planned: seen.append((done, planned))},
                            benchmark=False)
    tuning = artifact.report["tuning"]
    assert tuning["trials"] == 6 and tuning["cache_hits"] == 0
    assert [t["workload"] for t in tuning["tasks"]] == [t.name for t in tiny_tasks]
    assert [t["trials"] for t in tuning["tasks"]] == [4, 2]  # split by weight: the conv occurs twice
    for task in tuning["tasks"]:
        assert task["best_gflops"] > 0 and len(task["curve"]) == task["trials"]
        assert task["best_gflops"] >= task["default_gflops"]  # the default is measured first: never worse
    assert seen[0] == (0, 6) and seen[-1] == (6, 6)
    kernels = artifact.report["kernels"]
    assert sum(k["tuned"] for k in kernels) == 3  # two convs (one task) and the matmul
    assert artifact.report["validation"]["passed"]

    # The tuned model against ONNX Runtime on a fresh input.
    x = np.random.default_rng(7).standard_normal((1, 8, 16, 16)).astype(np.float32)
    want = ort.InferenceSession(tiny_model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    module = artifact.load()
    try:
        got = module.run({"x": x})["y"]
    finally:
        module.close()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

    # Again with the same records: nothing measured, every task a cache hit, the best configs applied.
    lines = records.read_text().count("\n")
    assert lines == 6 and all(r.compiler_version == core.__version__ for r in load_records(records))
    again = core.compile(tiny_model, tuning={"trials": 6, "records": str(records)}, benchmark=False)
    tuning = again.report["tuning"]
    assert tuning["trials"] == 0 and tuning["cache_hits"] == len(tiny_tasks) == 2
    assert records.read_text().count("\n") == lines
    assert sum(k["tuned"] for k in again.report["kernels"]) == 3
    db = RecordsDB(records)
    outcome = tune_graph(tiny_graph, get_target("native"), TuningOptions(records=str(records)))
    for task in tiny_tasks:
        # the records' best, unless within MIN_GAIN of the default's (then the default stays): session._choose
        best = db.best(task.key, "native", task.space.default.values, MIN_GAIN)
        assert outcome.chosen[task.key][1] == task.space.from_values(best.config).values


def test_no_records_no_tuning_is_untouched(tiny_model):
    report = core.compile(tiny_model, benchmark=False, validate=False).report
    assert report["tuning"] == {"trials": 0, "time_s": 0.0, "cache_hits": 0, "tasks": []}
    assert not any(k["tuned"] for k in report["kernels"])
