"""What `kiln compile --quick` costs at run time: each model compiled quick and default, then both timed by
Module.benchmark in the same process, interleaved round by round; prints median ms, quick/default and the load.

    .venv/bin/python bench/bench_quick_runtime.py [--models resnet18 mobilenet_v2] [--rounds 9] [--target native]
"""
from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import core

MODELS_DIR = Path(__file__).resolve().parents[2] / "shared" / "models"


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2"])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--repeat", type=int, default=20, help="Module.benchmark samples per round")
    parser.add_argument("--target", default="native")
    args = parser.parse_args()
    print(f"load before: {load()}")
    print(f"{'model':<16}{'quick ms':>10}{'default ms':>12}{'quick/default':>15}")
    for name in args.models:
        modules = {quick: core.compile(MODELS_DIR / f"{name}.onnx", target=args.target, quick=quick, benchmark=False,
                                       validate=False).load() for quick in (True, False)}
        feeds = modules[False].random_inputs()
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.rounds):
            for quick, module in modules.items():
                times[quick].append(module.benchmark(repeat=args.repeat, warmup=3, feeds=feeds)["median_ms"])
        quick_ms, default_ms = statistics.median(times[True]), statistics.median(times[False])
        print(f"{name:<16}{quick_ms:>10.2f}{default_ms:>12.2f}{quick_ms / default_ms:>14.2f}x")
    print(f"load after: {load()} ({args.rounds} rounds x {args.repeat} runs, medians)")


if __name__ == "__main__":
    main()
