"""A tuning budget is the total trials a workload gets, records included: more than the records hold
spends the difference (warm-started: no recorded config is measured again, the best so far is kept);
the same or less reuses the records without measuring."""
from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort

import core
from core.tune.records import load_records


def _configs(records, key):
    return [json.dumps(r.config, sort_keys=True) for r in load_records(records) if r.workload == key]


def test_a_larger_budget_spends_only_the_difference(tmp_path, tiny_model, tiny_tasks):
    records = tmp_path / "records.jsonl"
    first = core.compile(tiny_model, tuning={"trials": 6, "records": str(records), "batch_size": 2},
                         benchmark=False, validate=False).report["tuning"]
    assert first["trials"] == 6 and first["trials_from_records"] == 0
    assert [(t["trials_from_records"], t["trials_new"]) for t in first["tasks"]] == [(0, 4), (0, 2)]
    before = {t.key: _configs(records, t.key) for t in tiny_tasks}
    best_before = {t["key"]: t["best_gflops"] for t in first["tasks"]}

    # 10 trials split 7/3 by weight: the records hold 4 and 2, so 3 + 1 new trials.
    more = core.compile(tiny_model, tuning={"trials": 10, "records": str(records), "batch_size": 2},
                        benchmark=False).report
    tuning = more["tuning"]
    assert tuning["trials"] == 4 and tuning["cache_hits"] == 0 and tuning["trials_from_records"] == 6
    assert [(t["trials_from_records"], t["trials_new"], t["budget"]) for t in tuning["tasks"]] == [(4, 3, 7), (2, 1, 3)]
    for task, entry in zip(tiny_tasks, tuning["tasks"]):
        new = _configs(records, task.key)[len(before[task.key]):]
        assert len(new) == entry["trials_new"] and not set(new) & set(before[task.key])  # warm start: nothing re-measured
        assert entry["best_gflops"] >= best_before[task.key]  # the best so far is kept
        assert [n for n, _ in entry["curve"]] == list(range(entry["trials_from_records"] + 1, entry["budget"] + 1))
    assert sum(k["tuned"] for k in more["kernels"]) == 3 and more["validation"]["passed"]

    # The same budget or less: every task reuses its records, nothing is measured.
    lines = records.read_text().count("\n")
    for trials in (10, 3):
        again = core.compile(tiny_model, tuning={"trials": trials, "records": str(records)}, benchmark=False,
                             validate=False)
        assert again.report["tuning"]["trials"] == 0 and again.report["tuning"]["cache_hits"] == 2
        assert records.read_text().count("\n") == lines
    x = np.random.default_rng(3).standard_normal((1, 8, 16, 16)).astype(np.float32)
    want = ort.InferenceSession(tiny_model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    module = again.load()
    try:
        np.testing.assert_allclose(module.run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)
    finally:
        module.close()
