"""Compile time of `kiln compile` (the CLI, start to finish, as a user waits for it): each model, quick and default,
with a cold kernel cache (a new, empty directory) and then warm (the same directory again); against a baseline
checkout of Kiln when one is given, interleaved round by round; prints median wall seconds, median CPU seconds (user +
system of the compile and every process it started: on a shared machine, what the work costs whatever share the
scheduler gave it) and the machine's load.

    .venv/bin/python bench/bench_compile_time.py [--models resnet18 mobilenet_v2 bert_tiny] [--rounds 3]
        [--modes quick default] [--jobs 2] [--baseline /path/to/older/kiln]   # a tree with core/ and cli/
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS_DIR = ROOT.parent / "shared" / "models"


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def compile_once(tree: Path, model: Path, mode: str, cache: Path, jobs: int, out: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one `kiln compile` run from `tree` (its core/ and cli/ first on the path)."""
    env = dict(os.environ, PYTHONPATH=str(tree), KILN_BUILD_JOBS=str(jobs))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: modules load from their bytecode cache
    command = [sys.executable, "-m", "cli.main", "compile", str(model), "-o", str(out), "--kernel-cache", str(cache)]
    command += ["--quick"] if mode == "quick" else []
    start, cpu = time.perf_counter(), children_cpu()
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{tree}: kiln compile {model.name} failed:\n{done.stderr[-2000:]}")
    return seconds, children_cpu() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2", "bert_tiny"])
    parser.add_argument("--modes", nargs="+", choices=["quick", "default"], default=["quick", "default"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="KILN_BUILD_JOBS for this tree")
    parser.add_argument("--baseline", type=Path, help="an older Kiln tree, timed the same way in the same rounds")
    parser.add_argument("--baseline-jobs", type=int, help="KILN_BUILD_JOBS for the baseline (default: --jobs)")
    args = parser.parse_args()
    trees = {"this": (ROOT, args.jobs)}
    if args.baseline is not None:
        trees = {"baseline": (args.baseline.resolve(), args.baseline_jobs or args.jobs), **trees}
    times: dict[tuple, list[float]] = {}
    loads = [load()]
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.rounds):
            for model in args.models:
                for mode in args.modes:
                    for tree_name, (tree, jobs) in trees.items():
                        cache = Path(scratch) / f"cache-{tree_name}-{model}-{mode}-{round_}"
                        out = Path(scratch) / f"{tree_name}-{model}.tar.gz"
                        path = MODELS_DIR / f"{model}.onnx"
                        for state in ("cold", "warm"):  # warm: the cache the cold run just filled
                            seconds, cpu = compile_once(tree, path, mode, cache, jobs, out)
                            times.setdefault((model, mode, state, tree_name), []).append((seconds, cpu))
                            print(f"round {round_ + 1}: {model} {mode} {state} {tree_name}: {seconds:.1f} s, "
                                  f"CPU {cpu:.1f} s (load {load()})", file=sys.stderr)
            loads.append(load())
    print(f"kiln compile, median of {args.rounds} round(s): wall seconds / CPU seconds; jobs: "
          + ", ".join(f"{name} {jobs}" for name, (_, jobs) in trees.items()) + f"; load averages {' | '.join(loads)}")
    head = "| model | mode | cache | " + " | ".join(trees) + (" | this / baseline (wall, CPU) |" if len(trees) > 1 else " |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for model in args.models:
        for mode in args.modes:
            for state in ("cold", "warm"):
                medians = [tuple(statistics.median(run[i] for run in times[(model, mode, state, name)]) for i in (0, 1))
                           for name in trees]
                row = f"| {model} | {mode} | {state} | " + " | ".join(f"{wall:.1f} s / {cpu:.1f} s" for wall, cpu in medians)
                if len(medians) > 1:
                    row += f" | {medians[1][0] / medians[0][0]:.2f}x, {medians[1][1] / medians[0][1]:.2f}x"
                print(row + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
