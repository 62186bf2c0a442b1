"""Half precision against float32: per shared model, Kiln's float32 artifact, Kiln's artifact of the model's float16
variant (onnxconverter-common) and of the float32 model at `--precision fp16`/`bf16`, against ONNX Runtime on the
float32 and the float16 model; same inputs and threads, warm-up, interleaved rounds, medians; weights file sizes.

    .venv/bin/python bench/bench_precision.py [--models squeezenet1_1 ...] [--threads 2] [--rounds 15] [--bf16]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from bench_models import MODELS, MODELS_DIR, interleaved  # noqa: E402


def float16_variant(path: Path) -> bytes:
    import onnx
    from onnxconverter_common import float16

    with warnings.catch_warnings():  # "the float32 number ... will be truncated": what a float16 model is
        warnings.simplefilter("ignore")
        return float16.convert_float_to_float16(onnx.load(path), keep_io_types=False).SerializeToString()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("-t", "--target", default="native")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--bf16", action="store_true", help="also the float32 model at --precision bf16")
    parser.add_argument("--stat", choices=["median", "min"], default="median")
    args = parser.parse_args()

    import numpy as np

    import core
    from core.driver.validate import index_bounds, onnxruntime_session, random_inputs
    from core.frontend import import_onnx

    rows = []
    for name in args.models:
        path = MODELS_DIR / f"{name}.onnx"
        fp32, fp16 = path.read_bytes(), float16_variant(path)
        feeds32 = random_inputs(import_onnx(fp32), 7, index_bounds(import_onnx(fp32)))
        feeds16 = random_inputs(import_onnx(fp16), 7, index_bounds(import_onnx(fp16)))
        sessions = {"ort fp32": (onnxruntime_session(fp32, args.threads), feeds32),
                    "ort fp16 model": (onnxruntime_session(fp16, args.threads), feeds16)}
        builds = {"kiln fp32": (fp32, None, feeds32), "kiln fp16 model": (fp16, None, feeds16),
                  "kiln --precision fp16": (fp32, "fp16", feeds32)}
        if args.bf16:
            builds["kiln --precision bf16"] = (fp32, "bf16", feeds32)
        runners, modules, info = {}, [], {}
        for label, (session, feeds) in sessions.items():
            outputs = [o.name for o in session.get_outputs()]
            runners[label] = (lambda s, o, f: lambda: s.run(o, dict(f)))(session, outputs, feeds)
        for label, (model, precision, feeds) in builds.items():
            start = time.perf_counter()
            artifact = core.compile(model, target=args.target, benchmark=False, threads=args.threads, precision=precision)
            val = artifact.report["validation"]
            info[label] = (time.perf_counter() - start, artifact.metadata["weights_bytes"], val.get("max_abs_err", np.nan))
            module = artifact.load()
            module.set_num_threads(args.threads)
            modules.append(module)
            runners[label] = (lambda m, f: lambda: m.run(f))(module, feeds)
        times = interleaved(runners, args.rounds, stat=args.stat)
        for module in modules:
            module.close()
        rows.append((name, times, info))
        print(f"  {name}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in times.items()), file=sys.stderr)

    print(f"\ntarget {args.target}, {args.threads} threads, {args.stat} of {args.rounds} interleaved rounds (every "
          f"artifact and ONNX Runtime session in the same rounds); ratios against Kiln fp32 and ORT fp32\n")
    print("| model | build | ms | / Kiln fp32 | / ORT fp32 | weights MB | / fp32 weights | max abs err | compile s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, times, info in rows:
        base, ort, weights32 = times["kiln fp32"], times["ort fp32"], info["kiln fp32"][1]
        for label, ms in times.items():
            if label in info:
                compile_s, weights, err = info[label]
                print(f"| {name} | {label} | {ms:.3f} | {ms / base:.2f}x | {ms / ort:.2f}x | {weights / 1e6:.2f} | "
                      f"{weights / weights32:.2f} | {err:.1e} | {compile_s:.1f} |")
            else:
                print(f"| {name} | {label} | {ms:.3f} | {ms / base:.2f}x | {ms / ort:.2f}x | | | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
