"""Latency of Kiln against ONNX Runtime on the shared models: same inputs and thread count,
warm-up, interleaved rounds, medians; prints a table of ratios and their geometric mean.

    .venv/bin/python bench/bench_models.py [--models resnet18 ...] [-t native] [-O 3] [--threads 2]
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MODELS_DIR = ROOT.parent / "shared" / "models"
MODELS = ["resnet18", "mobilenet_v2", "squeezenet1_1", "bert_tiny"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("-t", "--target", default="native")
    parser.add_argument("-O", "--opt-level", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--rounds", type=int, default=25)
    args = parser.parse_args()

    import core
    from core.benchmark import compare_latency
    from core.frontend import import_onnx
    from core.validate import index_bounds, onnxruntime_session, random_inputs

    rows = []
    for name in args.models:
        path = MODELS_DIR / f"{name}.onnx"
        start = time.perf_counter()
        artifact = core.compile(path, target=args.target, opt_level=args.opt_level, validate=True, benchmark=False,
                                threads=args.threads)
        compile_s = time.perf_counter() - start
        module = artifact.load()
        module.set_num_threads(args.threads)
        graph = import_onnx(path)
        feeds = random_inputs(graph, 7, index_bounds(graph))
        session = onnxruntime_session(path.read_bytes(), args.threads)
        lat = compare_latency(module, session, feeds, rounds=args.rounds)
        module.close()
        rows.append((name, lat.kiln_ms, lat.onnxruntime_ms, lat.ratio, compile_s,
                     artifact.report["validation"].get("max_abs_err", float("nan"))))
        print(f"  {name}: kiln {lat.kiln_ms:.3f} ms, onnxruntime {lat.onnxruntime_ms:.3f} ms", file=sys.stderr)

    print(f"\ntarget {args.target}, -O{args.opt_level}, {args.threads} threads, median of {args.rounds} interleaved rounds\n")
    print(f"| model | Kiln ms | ONNX Runtime ms | ratio (Kiln/ORT) | compile s | max abs err |")
    print(f"|---|---:|---:|---:|---:|---:|")
    for name, k, o, r, c, e in rows:
        print(f"| {name} | {k:.3f} | {o:.3f} | {r:.2f}x | {c:.1f} | {e:.1e} |")
    geomean = math.exp(sum(math.log(r[3]) for r in rows) / len(rows))
    print(f"\ngeomean ratio: {geomean:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
