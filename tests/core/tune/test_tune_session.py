"""tune_graph's planning: a time budget is spread over every task by its share of the trials (the
last tasks are not starved), and another workload's long history is thinned across its range."""
from __future__ import annotations

import numpy as np

from core.backends import resolve
from core.tune import session
from core.tune.options import TuningOptions
from core.tune.features import FEATURE_VERSION
from core.tune.records import Record, RecordsDB
from core.tune.tuner import TuneResult

NATIVE = resolve("native")  # the target and its Backend, handed to tune_graph


def test_budget_is_spread_over_tasks_by_trial_share(tiny_graph, tiny_tasks, monkeypatch):
    clock = {"now": 1000.0}
    deadlines = []

    def fake_tune(task, tuner, measure, trials, batch_size, early_stopping, deadline, on_batch, should_stop=None):
        deadlines.append((task.key, trials, deadline - clock["now"]))
        clock["now"] += 1.0  # each task uses one second of the budget
        return TuneResult(task, trials=trials)

    monkeypatch.setattr(session.time, "monotonic", lambda: clock["now"])
    monkeypatch.setattr(session, "tune", fake_tune)
    monkeypatch.setattr(session, "Measurer", lambda task, runner, builder: type("M", (), {"close": lambda self: None})())
    session.tune_graph(tiny_graph, *NATIVE, TuningOptions(trials=6, time_budget_s=10.0, tuner="random"))
    assert [k for k, *_ in deadlines] == [t.key for t in tiny_tasks]
    (_, first_trials, first_s), (_, second_trials, second_s) = deadlines
    assert (first_trials, second_trials) == (4, 2)
    assert abs(first_s - 10.0 * 4 / 6) < 1e-9  # its share of the whole budget
    assert abs(second_s - 9.0) < 1e-9  # the last task gets all that is left


def test_history_of_another_workload_is_thinned_across_its_range(conv_task):
    db = RecordsDB()
    feats = tuple(0.0 for _ in range(4))
    db.add([Record("other", "native", {}, k, (1e-3,), 0, float(k), conv_task.template.op, feats, FEATURE_VERSION)
            for k in range(500)])
    db.add([Record("stale", "native", {}, k, (1e-3,), 0, float(k), conv_task.template.op, feats, FEATURE_VERSION - 1)
            for k in range(5)])
    (x, y), = session._history(db, conv_task)
    assert len(y) == session.HISTORY_PER_WORKLOAD and x.shape == (len(y), 4)
    assert y.min() == 0.0 and y.max() == 499.0 and np.all(np.diff(y) > 0)


def test_other_workloads_records_pre_train_the_model(tmp_path, tiny_graph, tiny_tasks):
    """Transfer: records of another conv workload (say, another model's) in the records file warm-start
    the conv task's cost model; its own tuning then measures and applies as usual."""
    from core.tune.features import FEATURE_LENGTH

    records = tmp_path / "records.jsonl"
    rng = np.random.default_rng(0)
    db = RecordsDB(records)
    db.add([Record("another-model-conv", "native", {}, k, (1e-3,), 0, float(rng.uniform(10, 100)), "Conv2dNCHWc",
                   tuple(rng.uniform(0, 4, FEATURE_LENGTH)), FEATURE_VERSION) for k in range(12)])
    outcome = session.tune_graph(tiny_graph, *NATIVE,
                                 TuningOptions(trials=4, records=str(records), batch_size=2, min_repeat_ms=1.0))
    conv = next(t for t in outcome.report["tasks"] if t["workload"].startswith("Conv2dNCHWc"))
    assert conv["transfer_workloads"] == 1 and conv["trials"] > 0 and conv["best_gflops"] > 0
    assert outcome.report["cost_model"]["fits"] > 0


def test_confirmation_times_the_top_configs_and_the_default_again(conv_task):
    from core.tune.measure import LocalRunner, Measurer

    space, db = conv_task.space, RecordsDB()
    others = [c for c in space if conv_task.valid(c) and c.index != space.default.index][:5]
    # One earlier timing each: the default at 100 GFLOP/s, five others from 90 to 130.
    db.add([Record(conv_task.key, "native", c.to_json(), c.index, (1e-3,), 0, g, conv_task.template.op)
            for c, g in [(space.default, 100.0)] + list(zip(others, (130.0, 120.0, 110.0, 95.0, 90.0)))])
    measurer = Measurer(conv_task, LocalRunner(timeout_s=20, min_repeat_ms=1.0, repeat=1, threads=1))
    try:
        assert session._confirm(conv_task, session._measure_and_record(conv_task, measurer, db), db) == 4
    finally:
        measurer.close()
    again = {r.index for r in db.records(conv_task.key, "native")[6:]}  # the records _confirm added
    assert again == {space.default.index, others[0].index, others[1].index, others[2].index}
    config, record = session._choose(db, conv_task)
    assert config.index in again  # only configs timed twice compete; the real timings decide which
    default = [r.gflops for r in db.records(conv_task.key, "native") if r.index == space.default.index]
    assert config.index == space.default.index or record.gflops >= np.median(default) * (1 + session.MIN_GAIN)


def test_asked_to_stop_ends_tuning_after_the_batch_and_keeps_the_best(tiny_graph, tiny_tasks):
    batches: list[dict] = []
    plans: list[dict] = []
    opts = TuningOptions(trials=64, tuner="random", batch_size=4, build_workers=1, min_repeat_ms=1.0,
                         on_plan=plans.append, on_batch=batches.append, should_stop=lambda: len(batches) >= 1)
    outcome = session.tune_graph(tiny_graph, *NATIVE, opts)
    assert plans[0]["trials"] == 64 and plans[0]["estimate_s"] > 0
    assert len(batches) == 1 and batches[0]["trials"] == 4 and batches[0]["planned"] == 64
    assert batches[0]["best_gflops"] > 0 and batches[0]["left_s"] >= 0
    report = outcome.report
    assert report["finished_early"] is True and report["trials"] == 4  # no other task started, nothing confirmed
    assert [t["stopped"] for t in report["tasks"]] == ["finished_early"] and outcome.chosen


def test_seconds_left_follows_the_measured_pace_within_the_budget():
    assert session.seconds_left(0.0, 0, 100, estimate_s=45.0) == 45.0  # before any trial: the estimate
    assert session.seconds_left(10.0, 20, 100, estimate_s=45.0) == 40.0  # 0.5 s a trial, 80 to go
    assert session.seconds_left(10.0, 20, 100, estimate_s=45.0, deadline_left_s=12.5) == 12.5
    assert session.seconds_left(60.0, 0, 100, estimate_s=45.0) == 0.0
