"""Tuning benchmark: trials to reach 95% of the best config found by any method, XGBoost vs random
search (median over seeds), on conv/dense tasks of resnet18; cost-model fit/predict time per batch;
optionally tuned resnet18 latency against ONNX Runtime.

    python bench/bench_tuning.py [--tasks 3] [--trials 48] [--seeds 3] [--latency-trials 0]

Each config is measured once (real builds and runs in the isolated runner) and cached, so every
method and seed is judged on the same numbers, and a second method costs no extra measurements.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.frontend import import_onnx  # noqa: E402
from core.graph.passes.manager import optimize  # noqa: E402
from core.target import get_target  # noqa: E402
from core.tune.measure import LocalRunner, Measurer  # noqa: E402
from core.tune.task import extract_tasks  # noqa: E402
from core.tune.tuner import RandomTuner, XGBTuner, tune  # noqa: E402

MODEL = ROOT.parent / "shared" / "models" / "resnet18.onnx"


class CachedMeasure:
    """Measures each config of a task once; later requests for it reuse the result."""

    def __init__(self, task, runner):
        self.task, self.measurer = task, Measurer(task, runner)
        self.cache = {}
        self.seconds = 0.0

    def __call__(self, configs):
        todo = [c for c in configs if c.index not in self.cache]
        if todo:
            start = time.perf_counter()
            _, results = self.measurer.measure(todo)
            self.seconds += time.perf_counter() - start
            self.cache.update({c.index: r for c, r in zip(todo, results)})
        return [self.cache[c.index] for c in configs]

    def best_gflops(self) -> float:
        return max((self.task.flops / r.mean_cost / 1e9 for r in self.cache.values() if r.ok), default=0.0)


def trials_to(curve, target: float):
    return next((t for t, g in curve if g >= target), None)


def pick_tasks(tasks, n):
    """The largest spaces first among distinct conv shapes, plus the dense layer when asked for 4+."""
    convs = sorted((t for t in tasks if t.template.op in ("Conv", "Conv2dNCHWc")), key=lambda t: -len(t.space))
    picked = convs[: max(1, n - 1)] if n >= 4 else convs[:n]
    if n >= 4:
        picked += [t for t in tasks if t.template.op == "MatMul"][:1]
    return picked


def run_tasks(args) -> None:
    target = get_target("native")
    graph = optimize(import_onnx(MODEL), 3)
    tasks = pick_tasks(extract_tasks(graph, target), args.tasks)
    runner = LocalRunner(timeout_s=10, min_repeat_ms=args.min_repeat_ms, repeat=3, threads=args.threads)
    print(f"{'task':44s} {'space':>5s} {'valid':>5s} {'best':>7s} {'default':>7s} "
          f"{'xgb->95%':>9s} {'rand->95%':>9s}  per-seed xgb / random")
    fits, predicts, feats = [], [], []
    for task in tasks:
        measure = CachedMeasure(task, runner)
        curves = {"xgb": [], "random": []}
        for seed in range(args.seeds):
            for method, make in (("xgb", XGBTuner), ("random", RandomTuner)):
                tuner = make(task, seed=seed)
                result = tune(task, tuner, measure, trials=args.trials, batch_size=args.batch)
                curves[method].append(result.curve)
                if method == "xgb":
                    fits += tuner.model.times.fits
                    predicts.append(sum(tuner.model.times.predicts) / max(1, len(tuner.model.times.fits)))
                    feats.append(tuner.feature_s)
        best = measure.best_gflops()
        default = measure.cache.get(task.space.default.index)
        default_gflops = task.flops / default.mean_cost / 1e9 if default is not None and default.ok else 0.0
        reach = {m: [trials_to(c, 0.95 * best) for c in cs] for m, cs in curves.items()}

        def med(xs):
            vals = [x if x is not None else args.trials + 1 for x in xs]
            m = statistics.median(vals)
            return f">{args.trials}" if m > args.trials else f"{m:g}"

        valid = sum(1 for c in task.space if task.valid(c))
        print(f"{task.name:44s} {len(task.space):5d} {valid:5d} {best:7.1f} {default_gflops:7.1f} "
              f"{med(reach['xgb']):>9s} {med(reach['random']):>9s}  {reach['xgb']} / {reach['random']}"
              f"   ({len(measure.cache)} configs measured, {measure.seconds:.0f} s)", flush=True)
        measure.measurer.close()
    print(f"cost model: fit {1e3 * statistics.median(fits):.1f} ms median per batch (max {1e3 * max(fits):.1f} ms, "
          f"{len(fits)} fits); predict {1e3 * statistics.median(predicts):.1f} ms per batch (SA scoring); "
          f"features {statistics.median(feats):.2f} s per tuning run")


def run_latency(args) -> None:
    import core

    with tempfile.TemporaryDirectory() as tmp:
        base = core.compile(MODEL, benchmark=True).report["latency_ms"]
        start = time.perf_counter()
        tuned = core.compile(MODEL, tuning={"trials": args.latency_trials, "records": str(Path(tmp) / "r.jsonl")},
                             benchmark=True).report
        print(f"resnet18 untuned: kiln {base['kiln']:.2f} ms, onnxruntime {base['onnxruntime']:.2f} ms "
              f"(ratio {base['ratio']:.2f})")
        lat = tuned["latency_ms"]
        print(f"resnet18 tuned ({tuned['tuning']['trials']} trials, {time.perf_counter() - start:.0f} s): kiln "
              f"{lat['kiln']:.2f} ms, onnxruntime {lat['onnxruntime']:.2f} ms (ratio {lat['ratio']:.2f})")
        for t in tuned["tuning"]["tasks"]:
            print(f"  {t['workload']:44s} {t['trials']:3d} trials  {t.get('default_gflops', 0):7.1f} -> "
                  f"{t['best_gflops']:7.1f} GFLOP/s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=3)
    p.add_argument("--trials", type=int, default=48)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=0, help="kernel threads (0: all cores)")
    p.add_argument("--min-repeat-ms", type=float, default=10.0)
    p.add_argument("--latency-trials", type=int, default=0, help="also tune all of resnet18 with this many trials")
    args = p.parse_args()
    np.random.seed(0)
    if args.tasks:
        run_tasks(args)
    if args.latency_trials:
        run_latency(args)


if __name__ == "__main__":
    main()
