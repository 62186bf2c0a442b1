"""The tuning stage of a compile: extract tasks, reuse records (cache hits), tune the rest within the
trial and time budget (trials split by weight), save records, and hand the executor the best configs.
Records are used only where they were measured as the job's runner measures (records.NATIVE or EMULATED)."""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np

from ..graph.ir import Graph, Node
from ..kernels.registry import ScheduleFn
from ..target import Target
from .features import FEATURE_VERSION, itervar_features
from .measure import LocalBuilder, LocalRunner, MeasureErrorNo, MeasureResult, Measurer, default_build_workers
from .records import NATIVE, Record, RecordsDB
from .space import Config, ConfigSpaceError
from .task import Task, extract_tasks, group_task
from .options import TuningOptions
from .tuner import TUNERS, TuneResult, XGBTuner, tune

if TYPE_CHECKING:
    from ..backends.base import Backend

SECONDS_PER_TRIAL = 0.45  # build (~0.25 s) + run checks and timing; for the up-front estimate
SECONDS_PER_TASK = 1.5  # worker start, reference build


def split_trials(tasks: Sequence[Task], trials: int) -> list[int]:
    """Trials per task in proportion to its weight (largest remainders first; heaviest tasks first
    when there are fewer trials than tasks)."""
    total = sum(t.weight for t in tasks)
    if not tasks or trials <= 0:
        return [0] * len(tasks)
    exact = [trials * t.weight / total for t in tasks]
    share = [math.floor(x) for x in exact]
    order = sorted(range(len(tasks)), key=lambda k: -(exact[k] - share[k]))
    for k in order[: trials - sum(share)]:
        share[k] += 1
    return share


def estimate_seconds(trials: int, tasks: int) -> float:
    return round(trials * SECONDS_PER_TRIAL + tasks * SECONDS_PER_TASK, 1)


@dataclass
class TuningOutcome:
    """What the compile needs from tuning: the chosen config per workload and the report section."""

    graph: Graph
    target: Target
    backend: "Backend"
    chosen: dict[str, tuple[Task, dict]] = field(default_factory=dict)  # workload key -> (task, knob values)
    report: dict = field(default_factory=dict)
    tuned_kernels: set[str] = field(default_factory=set)

    def schedule_for(self, name: str, node: Node) -> Optional[ScheduleFn]:
        """The executor's hook: the best config's schedule for the kernel of `node`, if there is one."""
        if not self.chosen:
            return None
        task = group_task(node, self.graph, self.target, self.backend)
        if task is None or task.key not in self.chosen:
            return None
        self.tuned_kernels.add(name)
        return task.schedule_fn(self.chosen[task.key][1])


# Choosing a task's config: after at least CONFIRM_AFTER trials, its CONFIRM_TOP fastest configs and
# the default are measured once more (the best of many noisy timings is partly luck), and a config
# must beat the default's median by MIN_GAIN to replace it.
CONFIRM_AFTER = 32
CONFIRM_TOP = 3
MIN_GAIN = 0.03
HISTORY_PER_WORKLOAD = 200  # records of one other workload the model pre-trains on (fit time grows with them)


def history_group(features: Sequence[Sequence[float]], gflops: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """One other workload's measurements as a query group of the cost model. A long history is
    thinned evenly over its throughput order, so it still spans slow to fast."""
    order = sorted(range(len(gflops)), key=lambda k: gflops[k])
    if len(order) > HISTORY_PER_WORKLOAD:
        step = (len(order) - 1) / (HISTORY_PER_WORKLOAD - 1)
        order = [order[round(k * step)] for k in range(HISTORY_PER_WORKLOAD)]
    return np.asarray([features[k] for k in order], np.float32), np.asarray([gflops[k] for k in order], np.float64)


def _history(db: RecordsDB, task: Task, measured: str = NATIVE) -> list[tuple[np.ndarray, np.ndarray]]:
    """Transfer learning: measurements of other workloads of the same op and target (another model's
    records, or this compile's tasks tuned before this one), one query group each."""
    return [history_group([r.features for r in recs], [r.gflops for r in recs])
            for recs in db.others(task.key, task.target.name, task.template.op, FEATURE_VERSION, measured).values()]


def _make_tuner(opts: TuningOptions, task: Task, db: RecordsDB, measured: str = NATIVE):
    if opts.tuner == "xgb":
        return XGBTuner(task, seed=opts.seed, history=_history(db, task, measured))
    return TUNERS[opts.tuner](task, seed=opts.seed)


def _measure_and_record(task: Task, measurer: Measurer, db: RecordsDB, searched_kinds: Optional[set[str]] = None):
    """The measure function tune() calls: results also become records (of the kind each was measured as), appended
    batch by batch. The search sees a result of another kind than its job's as a failed one (a qemu timing in a job
    that real devices answer); `searched_kinds` collects the kinds it did see."""

    def measure(configs: Sequence[Config]):
        builds, results = measurer.measure(configs)
        records = []
        for config, build, res in zip(configs, builds, results):
            gflops = task.flops / res.mean_cost / 1e9 if res.ok else 0.0
            feats = tuple(itervar_features(build.func).tolist()) if res.ok and build.func is not None else None
            records.append(Record(task.key, task.target.name, config.to_json(), config.index, res.costs,
                                  int(res.error_no), gflops, task.template.op, feats, FEATURE_VERSION,
                                  measured=res.measured))
        db.add(records)
        job_kind = measurer.runner.measured
        if searched_kinds is not None:
            searched_kinds.update(res.measured for res in results if res.measured == job_kind)
        return [res if res.measured == job_kind else
                MeasureResult((), MeasureErrorNo.RUNTIME_DEVICE, f"measured {res.measured}, in a {job_kind} job",
                              res.all_cost, res.timestamp, job_kind)
                for res in results]

    return measure


def _choose(db: RecordsDB, task: Task, measured: str = NATIVE) -> tuple[Optional[Config], Optional[Record]]:
    """The config to apply from the records of kind `measured` (and the record that stands for it), if any."""
    best = db.best(task.key, task.target.name, task.space.default.values, MIN_GAIN, measured)
    if best is None:
        return None, None
    try:
        return task.space.from_values(best.config), best
    except ConfigSpaceError:  # recorded for an older space: tune again
        return None, None


def _confirm(task: Task, measure, db: RecordsDB, measured: str = NATIVE) -> int:
    """Measure the task's fastest few configs and its default once more (records, like any trial);
    returns how many were measured."""
    configs = {task.space.default.index: task.space.default}
    for rec in db.top(task.key, task.target.name, CONFIRM_TOP, measured):
        config = task.space.from_values(rec.config)
        configs.setdefault(config.index, config)
    measure(list(configs.values()))
    return len(configs)


def recorded_trials(db: RecordsDB, task: Task, measured: str = NATIVE) -> list[Record]:
    """The task's records of kind `measured` that count as trials already spent: one per config measured
    (re-timings of a config, such as a confirmation, are not new trials)."""
    seen: dict[str, Record] = {}
    for rec in db.records(task.key, task.target.name, measured):
        try:
            task.space.from_values(rec.config)
        except ConfigSpaceError:  # recorded for an older space: not a trial of this one
            continue
        seen.setdefault(json.dumps(rec.config, sort_keys=True), rec)
    return list(seen.values())


def _warm_start(tuner, task: Task, recorded: Sequence[Record]) -> None:
    """Continue from the records: their configs are not proposed again, and the cost model learns them."""
    tuner.warm_start([task.space.from_values(r.config) for r in recorded], [r.gflops if r.ok else 0.0 for r in recorded],
                     [r.features if r.feature_version == FEATURE_VERSION else None for r in recorded])


def seconds_left(elapsed_s: float, done: int, planned: int, estimate_s: float,
                 deadline_left_s: Optional[float] = None) -> float:
    """What a running tuning has left: the measured pace once trials are done (the up-front estimate
    before), never past the time budget."""
    left = elapsed_s / done * (planned - done) if done else max(0.0, estimate_s - elapsed_s)
    if deadline_left_s is not None:
        left = min(left, max(0.0, deadline_left_s))
    return round(left, 1)


def tune_graph(graph: Graph, target: Target, backend: "Backend", opts: TuningOptions) -> TuningOutcome:
    """Tunes `graph`'s kernels for `target` with its `backend` (handed down). A budget is the total trials each workload gets, records included: a workload whose records
    hold fewer trials than its share is tuned for the difference (warm-started from them); one whose
    records hold as many or more reuses them without measuring (a cache hit)."""
    start = time.perf_counter()
    notify = opts.progress or (lambda done, planned: None)
    asked_to_stop = opts.should_stop or (lambda: False)
    outcome = TuningOutcome(graph, target, backend)
    tasks = extract_tasks(graph, target, backend)
    db = RecordsDB(opts.records, out=opts.records_out)
    entries: dict[str, dict] = {}
    cache_hits = 0
    todo: list[Task] = []
    shares: list[int] = []
    from_records: dict[str, list[Record]] = {}
    # Measuring needs the target's hardware, here or remote: elsewhere only the records are used.
    measurable = opts.remote is not None or backend.can_measure(target)
    budgets = split_trials(tasks, opts.trials if measurable else 0)
    from .remote import RemoteRunner  # here: most compiles measure locally, and it loads the emulation runtime

    runner = (RemoteRunner(opts.remote, timeout_s=opts.timeout_s, min_repeat_ms=opts.min_repeat_ms,
                           threads=opts.threads or target.num_cores) if opts.remote is not None else
              LocalRunner(timeout_s=opts.timeout_s, min_repeat_ms=opts.min_repeat_ms,
                          threads=opts.threads or target.num_cores, timing_lock=opts.timing_lock))
    planned_kind = runner.measured  # a remote runner's until its devices answer: native
    for task, budget in zip(tasks, budgets):
        config, best = _choose(db, task, planned_kind)
        recorded = recorded_trials(db, task, planned_kind)
        from_records[task.key] = recorded
        if config is not None:  # the best so far, kept whatever the tuning below finds or misses
            outcome.chosen[task.key] = (task, dict(config.values))
            entries[task.key] = {"workload": task.name, "key": task.key, "weight": task.weight, "trials": 0,
                                 "trials_from_records": len(recorded), "trials_new": 0, "budget": budget,
                                 "best_gflops": round(best.gflops, 3), "curve": [], "cached": True}
        if config is not None and budget <= len(recorded):
            cache_hits += 1
        else:
            todo.append(task)
            shares.append(max(0, budget - len(recorded)))
    planned = sum(shares)
    estimate = estimate_seconds(planned, sum(1 for s in shares if s))
    if opts.time_budget_s is not None:
        estimate = min(estimate, opts.time_budget_s)
    deadline = time.monotonic() + opts.time_budget_s if opts.time_budget_s else None
    done = 0
    finished_early = False
    measuring_since = time.monotonic()
    fit_s: list[float] = []
    predict_s: list[float] = []
    if opts.on_plan is not None:
        opts.on_plan({"tasks": len(tasks), "tuned_tasks": sum(1 for s in shares if s), "trials": planned,
                      "cache_hits": cache_hits, "estimate_s": estimate,
                      "trials_from_records": sum(len(v) for v in from_records.values())})
    notify(0, planned)
    builder = LocalBuilder(n_parallel=opts.build_workers or default_build_workers())  # its processes serve every task
    try:
        trials_left = planned
        for task, share in zip(todo, shares):
            if share == 0:
                continue
            if deadline is not None and time.monotonic() >= deadline:
                break
            if asked_to_stop():
                finished_early = True
                break
            # Each task gets the share of the time left that its trials have of the trials left, so a
            # budget shorter than the trials spreads over every task instead of starving the last ones.
            task_deadline = None
            if deadline is not None:
                now = time.monotonic()
                task_deadline = now + (deadline - now) * share / max(1, trials_left)
            trials_left -= share
            recorded = from_records[task.key]
            tuner = _make_tuner(opts, task, db, planned_kind)
            _warm_start(tuner, task, recorded)
            measurer = Measurer(task, runner, builder)
            base = done

            def on_batch(res: TuneResult, base=base, task=task,
                         recorded_best=max([r.gflops for r in recorded], default=0.0)) -> None:
                trials = min(planned, base + res.trials)
                if opts.on_batch is not None:
                    now = time.monotonic()
                    opts.on_batch({"trials": trials, "planned": planned, "workload": task.name, "flops": task.flops,
                                   "best_gflops": round(max(res.best_gflops, recorded_best), 3),
                                   "elapsed_s": round(now - measuring_since, 1), "estimate_s": estimate,
                                   "left_s": seconds_left(now - measuring_since, trials, planned, estimate,
                                                          deadline - now if deadline is not None else None)})
                notify(trials, planned)

            searched_kinds: set[str] = set()
            measure = _measure_and_record(task, measurer, db, searched_kinds)
            try:
                result = tune(task, tuner, measure, share, opts.batch_size, opts.early_stopping, task_deadline, on_batch,
                              should_stop=asked_to_stop)
                finished_early = finished_early or result.stopped == "finished_early"
                confirmed = 0
                if (result.trials and result.trials + len(recorded) >= CONFIRM_AFTER and not finished_early
                        and (deadline is None or time.monotonic() < deadline)):
                    confirmed = _confirm(task, measure, db, runner.measured)
            finally:
                measurer.close()
            done += result.trials
            if isinstance(tuner, XGBTuner):
                fit_s += tuner.model.times.fits
                predict_s += tuner.model.times.predicts
            # Built from the job's kind of records, which its devices' answers decided (an all-emulated job's own).
            config, chosen = _choose(db, task, runner.measured)
            searched_best = result.best if searched_kinds <= {runner.measured} else None
            if config is not None or searched_best is not None:  # the best so far, records included
                outcome.chosen[task.key] = (task, dict((config or searched_best).values))
            recorded_best = max([r.gflops for r in recorded], default=0.0)
            default_gflops = result.default_gflops or next(
                (r.gflops for r in recorded if task.space.default is not None and r.config == task.space.default.to_json()), 0.0)
            best_gflops = max(result.best_gflops, recorded_best)
            curve = [[len(recorded) + n, round(max(g, recorded_best), 3)] for n, g in result.curve]
            entries[task.key] = {"workload": task.name, "key": task.key, "weight": task.weight, "trials": result.trials,
                                 "trials_from_records": len(recorded), "trials_new": result.trials,
                                 "budget": len(recorded) + share, "best_gflops": round(best_gflops, 3),
                                 "default_gflops": round(default_gflops, 3),
                                 "curve": curve, "errors": result.errors,
                                 "stopped": result.stopped, "cached": False, "confirmed": confirmed,
                                 "transfer_workloads": getattr(tuner, "history_groups", 0),
                                 "best_config": result.best.to_json() if result.best else None,
                                 # what the compile applies: a confirmed median, or the default's (MIN_GAIN)
                                 "chosen_config": chosen.config if chosen is not None else None,
                                 "chosen_gflops": round(chosen.gflops, 3) if chosen is not None else None}
    finally:
        builder.close()
    notify(min(planned, done), planned)
    outcome.report = {
        "trials": done, "time_s": round(time.perf_counter() - start, 3), "cache_hits": cache_hits,
        "trials_from_records": sum(len(v) for v in from_records.values()),
        "tasks": [entries[t.key] for t in tasks if t.key in entries], "num_tasks": len(tasks),
        "estimate_s": estimate, "finished_early": finished_early, "tuner": opts.tuner, "records": db.as_dict(),
        "cost_model": {"fits": len(fit_s), "fit_s_mean": round(float(np.mean(fit_s)), 4) if fit_s else None,
                       "predict_s_per_batch": round(float(np.sum(predict_s)) / max(1, len(fit_s)), 4) if predict_s else None},
    }
    if isinstance(runner, RemoteRunner):
        outcome.report["measurement"] = runner.summary()
    return outcome


__all__ = ["TuningOutcome", "tune_graph", "recorded_trials", "split_trials", "estimate_seconds", "seconds_left",
           "history_group"]
