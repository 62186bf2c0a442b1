"""Latency of Kiln against ONNX Runtime on the shared models: same inputs and thread count,
warm-up, interleaved rounds, medians; prints a table of ratios and their geometric mean.
Several -O levels are compiled and timed in the same interleaved rounds (e.g. `-O 0 3`).

    .venv/bin/python bench/bench_models.py [--models resnet18 ...] [-t native] [-O 0 3] [--threads 2]
    .venv/bin/python bench/bench_models.py --model /work/unseen/t5_encoder.onnx [--model other.onnx ...]

`--models` names shared models (MODELS_DIR/NAME.onnx); `--model PATH` adds any ONNX file (repeatable);
given only `--model`, the shared defaults are skipped.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MODELS_DIR = ROOT.parent / "shared" / "models"
MODELS = ["resnet18", "mobilenet_v2", "squeezenet1_1", "bert_tiny"]


def _time_ms(fn, number: int, clock=time.perf_counter) -> float:
    start = clock()
    for _ in range(number):
        fn()
    return (clock() - start) * 1000.0 / number


def interleaved(runners: dict, rounds: int, warmup: int = 3, min_round_ms: float = 20.0,
                settle_s: float = 0.3, stat: str = "median", clock=time.perf_counter) -> dict[str, float]:
    """Median (or fastest, `stat="min"`) round's ms per call of each runner, timed round-robin so
    that drift (turbo, neighbours) hits all alike; each runtime's spinning worker threads settle
    before the next one's round. On a shared, overloaded machine preemption only adds time, so the
    fastest round estimates the unloaded latency better than the median. `clock=time.thread_time` times
    the calling thread's CPU time instead of the wall: preemption adds nothing to it, and a runtime on one
    thread (Kiln's and ONNX Runtime's both run on the caller) spends all its time there."""
    for _ in range(warmup):
        for fn in runners.values():
            fn()
    number = {k: max(1, int(min_round_ms / max(_time_ms(fn, 1), 1e-3))) for k, fn in runners.items()}
    samples: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(rounds):
        for k, fn in runners.items():
            time.sleep(settle_s)
            samples[k].append(_time_ms(fn, number[k], clock))
    pick = min if stat == "min" else statistics.median
    return {k: pick(v) for k, v in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=None, help=f"shared model names (default {MODELS})")
    parser.add_argument("--model", action="append", default=[], metavar="PATH", help="an ONNX file (repeatable)")
    parser.add_argument("-t", "--target", default="native")
    parser.add_argument("-O", "--opt-level", type=int, nargs="+", default=[3], choices=[0, 1, 2, 3])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--stat", choices=["median", "min"], default="median",
                        help="per runner: the median round, or the fastest (for a busy machine)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time the calling thread's CPU time (with --threads 1: preemption by neighbours adds nothing)")
    args = parser.parse_args()

    import core
    from core.frontend import import_onnx
    from core.driver.validate import index_bounds, onnxruntime_session, random_inputs

    levels = list(dict.fromkeys(args.opt_level))
    names = args.models if args.models is not None else ([] if args.model else MODELS)
    paths = {name: MODELS_DIR / f"{name}.onnx" for name in names}
    paths.update({Path(p).stem: Path(p) for p in args.model})
    rows = []
    for name, path in paths.items():
        graph = import_onnx(path)
        feeds = random_inputs(graph, 7, index_bounds(graph))
        session = onnxruntime_session(path.read_bytes(), args.threads)
        outputs = [o.name for o in session.get_outputs()]
        runners = {"ort": lambda: session.run(outputs, dict(feeds))}
        modules, info = [], {}
        for level in levels:
            start = time.perf_counter()
            artifact = core.compile(path, target=args.target, opt_level=level, validate=True, benchmark=False,
                                    threads=args.threads)
            compile_s = time.perf_counter() - start
            module = artifact.load()
            module.set_num_threads(args.threads)
            modules.append(module)
            runners[f"O{level}"] = (lambda m: lambda: m.run(feeds))(module)
            report = artifact.report
            info[level] = (compile_s, report["validation"].get("max_abs_err", float("nan")), report["graph"]["kernels"],
                           report["memory"]["arena_bytes"] / max(1, report["memory"]["naive_bytes"]))
        times = interleaved(runners, args.rounds, stat=args.stat,
                            clock=time.thread_time if args.cpu_time else time.perf_counter)
        for module in modules:
            module.close()
        for level in levels:
            kiln, ort = times[f"O{level}"], times["ort"]
            rows.append((name, level, kiln, ort, kiln / ort, *info[level]))
            print(f"  {name} -O{level}: kiln {kiln:.3f} ms, onnxruntime {ort:.3f} ms", file=sys.stderr)

    clock = "CPU time of the calling thread" if args.cpu_time else "wall clock"
    print(f"\ntarget {args.target}, {args.threads} threads, {args.stat} of {args.rounds} interleaved rounds, {clock} "
          f"(ONNX Runtime and every -O level in the same rounds)\n")
    print("| model | -O | Kiln ms | ONNX Runtime ms | ratio (Kiln/ORT) | kernels | arena/naive | compile s | max abs err |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, level, k, o, r, c, e, nk, mem in rows:
        print(f"| {name} | {level} | {k:.3f} | {o:.3f} | {r:.2f}x | {nk} | {mem:.2f} | {c:.1f} | {e:.1e} |")
    print()
    for level in levels:
        ratios = [r[4] for r in rows if r[1] == level]
        print(f"-O{level} geomean ratio: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}x")
    if len(levels) > 1:
        first, last = levels[0], levels[-1]
        by = {(r[0], r[1]): r[2] for r in rows}
        for name in paths:
            print(f"{name}: -O{first} / -O{last} = {by[(name, first)] / by[(name, last)]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
