"""Where the seconds of one `kiln compile` go, phase by phase (interpreter start, imports, pre-flight, the compile's
own stages, saving, exit), cold kernel cache and warm, medians over rounds; `--profile N` also prints the N functions
of one cold compile (built on one process unless --profile-jobs says more: cProfile sees no forked worker), by
cumulative and by own time.

    .venv/bin/python bench/bench_compile_phases.py [--model resnet18] [--rounds 3] [--default] [--profile 30]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS_DIR = ROOT.parent / "shared" / "models"

# Runs in the compiling process: `kiln compile` as the console script runs it, with clocks around the parts the
# report's timings_s leave out. Arguments: the CLI's argv, then where to write the clocks and (or "") the profile.
DRIVER = r"""
import gc, sys, time, json
clocks = {"started": time.perf_counter(), "gc": 0.0}
def _gc_clock(phase, info, started=[0.0]):  # the collector's own time in this process
    if phase == "start":
        started[0] = time.perf_counter()
    else:
        clocks["gc"] += time.perf_counter() - started[0]
gc.callbacks.append(_gc_clock)
argv, clock_file, profile_file = sys.argv[1:-2], sys.argv[-2], sys.argv[-1]
if profile_file:
    import cProfile
    profiler = cProfile.Profile()
    profiler.enable()
import core, cli.main as cli
from core.driver.artifact import Artifact
clocks["cli imported"] = time.perf_counter()
def timed(name, fn):
    def run(*args, **kwargs):
        clocks[name + " start"] = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            clocks[name + " end"] = time.perf_counter()
    return run
core.compile = timed("compile", core.compile)
cli._preflight = timed("preflight", cli._preflight)
Artifact.save = timed("save", Artifact.save)
code = cli.main(argv)
clocks["main returned"] = time.perf_counter()
if profile_file:
    profiler.disable()
    profiler.dump_stats(profile_file)
with open(clock_file, "w") as f:
    json.dump(clocks, f)
sys.exit(code)
"""


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def compile_once(model: Path, quick: bool, cache: Path, scratch: Path, profile: str = "",
                 profile_jobs: int = 1) -> dict[str, float]:
    """One `kiln compile` in a fresh interpreter: its phases in seconds. Profiled, it builds on `profile_jobs`
    processes (1: the profile sees the lowering and code generation too)."""
    out, clock_file = scratch / "out.tar.gz", scratch / "clocks.json"
    argv = ["compile", str(model), "-o", str(out), "--kernel-cache", str(cache)] + (["--quick"] if quick else [])
    argv += ["--jobs", str(profile_jobs)] if profile else []
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: modules load from their bytecode cache
    start, cpu = time.perf_counter(), children_cpu()
    done = subprocess.run([sys.executable, "-c", DRIVER, *argv, str(clock_file), profile], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"kiln compile {model.name} failed:\n{done.stderr[-3000:]}")
    c = json.loads(clock_file.read_text())
    with tarfile.open(out, "r:gz") as tar:
        report = json.load(tar.extractfile("report.json"))
    stages = report["timings_s"]
    compile_s = c["compile end"] - c["compile start"]
    phases = {"wall": wall, "CPU (all processes)": children_cpu() - cpu,
              "interpreter start": None,  # filled below: wall less what the process timed itself
              "imports (cli, core)": c["cli imported"] - c["started"],
              "argparse, checks before pre-flight": c["preflight start"] - c["cli imported"],
              "pre-flight (load, check ops)": c["preflight end"] - c["preflight start"],
              "until core.compile (imports it makes)": c["compile start"] - c["preflight end"]}
    named = 0.0
    for key in ("import", "optimize", "tune", "build", "validate", "benchmark"):
        if key in stages:
            phases[f"compile: {key}"] = stages[key]
            named += stages[key]
    phases["compile: the rest (reference session, load, report)"] = compile_s - named
    phases["save"] = c["save end"] - c["save start"]
    phases["after save until main returns"] = c["main returned"] - c["save end"]
    timed_here = c["main returned"] - c["started"]
    phases["interpreter start + exit"] = wall - timed_here
    phases["of these: the collector (main process)"] = c["gc"]
    del phases["interpreter start"]
    build = report.get("build") or {}
    phases["kernels built"] = float(build.get("built", 0))
    phases["kernels (distinct)"] = float(build.get("kernels", 0))
    return phases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--default", action="store_true", help="time the default compile instead of --quick")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="after the rounds, one cold compile on one process (--jobs 1) under cProfile: its N most "
                             "expensive functions, by cumulative and by own time")
    parser.add_argument("--profile-out", type=Path, help="keep the profile there (pstats), e.g. to read its callers")
    parser.add_argument("--profile-jobs", type=int, default=1, metavar="J",
                        help="build processes of the profiled compile (more: the profile is the main process's)")
    args = parser.parse_args()
    model = MODELS_DIR / f"{args.model}.onnx"
    quick = not args.default
    runs: dict[str, list[dict]] = {"cold": [], "warm": []}
    loads = [load()]
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        for round_ in range(args.rounds):
            cache = scratch / f"cache-{round_}"
            for state in ("cold", "warm"):
                runs[state].append(compile_once(model, quick, cache, scratch))
                print(f"round {round_ + 1} {state}: {runs[state][-1]['wall']:.2f} s (load {load()})", file=sys.stderr)
            loads.append(load())
        if args.rounds:
            print(f"kiln compile {args.model}{' --quick' if quick else ''}: seconds, median of {args.rounds} round(s); "
                  f"load averages {' | '.join(loads)}")
            print("| phase | cold | warm |")
            print("|---|---|---|")
            for phase in runs["cold"][0]:
                values = [statistics.median(run.get(phase, 0.0) for run in runs[state]) for state in ("cold", "warm")]
                fmt = "{:.0f}" if phase.startswith("kernels") else "{:.2f}"
                print(f"| {phase} | " + " | ".join(fmt.format(v) for v in values) + " |")
        if args.profile:
            import pstats

            stats_file = args.profile_out or scratch / "profile.out"
            compile_once(model, quick, scratch / "cache-profiled", scratch, str(stats_file), args.profile_jobs)
            for order in ("cumulative", "tottime"):
                pstats.Stats(str(stats_file)).sort_stats(order).print_stats(args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
