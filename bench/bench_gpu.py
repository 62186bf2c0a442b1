"""Latency of Kiln's cuda artifacts against ONNX Runtime's CUDA execution provider on the shared
models: same inputs, warm-up, interleaved rounds, medians; each artifact is also checked against
ONNX Runtime (CPU) first. Needs an NVIDIA GPU and onnxruntime-gpu.

    python bench/bench_gpu.py [--models resnet18 ...] [--models-dir DIR] [-t "cuda -arch=sm_90"] [--rounds 15]
                              [--precision fp32|fp16|int8]

--precision fp16 times each model's float16 variant (onnxconverter-common: Kiln's MatMuls on tensor cores,
mma.sync), int8 its QDQ copy quantized by ORT's quantize_static (per-channel weights, uint8 activations: Kiln's
convs and matmuls with dp4a), each against ONNX Runtime's CUDA provider on the same model.

Both sides take host arrays and return host arrays (Kiln's C ABI copies in and out, as ORT's
`session.run` does with numpy inputs), so the times compare like for like.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_models import MODELS, MODELS_DIR, interleaved  # noqa: E402


def cuda_session(model: bytes):
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise SystemExit(f"onnxruntime {ort.__version__} has no CUDAExecutionProvider (install onnxruntime-gpu)")
    session = ort.InferenceSession(model, providers=["CUDAExecutionProvider"])
    if session.get_providers()[0] != "CUDAExecutionProvider":
        raise SystemExit(f"ONNX Runtime did not start its CUDA provider: {session.get_providers()}")
    return session


def model_variant(path: Path, precision: str, folder: Path) -> bytes:
    """The model bytes Kiln and ONNX Runtime both run at `precision`."""
    if precision == "fp16":
        from bench_precision import float16_variant

        return float16_variant(path)
    if precision == "int8":
        from bench_int8 import quantized_copy

        return quantized_copy(path, folder, samples=8).read_bytes()
    return path.read_bytes()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--models-dir", type=Path, default=MODELS_DIR)
    parser.add_argument("-t", "--target", default="cuda")
    parser.add_argument("-O", "--opt-level", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--profile", type=int, default=6, help="print this many slowest kernels per model")
    parser.add_argument("--precision", choices=("fp32", "fp16", "int8"), default="fp32")
    args = parser.parse_args()
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="kiln-bench-gpu-"))

    import core
    from core.frontend import import_onnx
    from core.driver.validate import index_bounds, onnxruntime_session, random_inputs

    rows = []
    for name in args.models:
        model = model_variant(args.models_dir / f"{name}.onnx", args.precision, folder)
        graph = import_onnx(model)
        feeds = random_inputs(graph, 7, index_bounds(graph))
        reference = onnxruntime_session(model, 4)
        outputs = [o.name for o in reference.get_outputs()]
        expected = reference.run(outputs, dict(feeds))
        session = cuda_session(model)
        start = time.perf_counter()
        artifact = core.compile(model, target=args.target, opt_level=args.opt_level, validate=True, benchmark=False)
        compile_s = time.perf_counter() - start
        module = artifact.load()
        got = module.run(feeds)
        err = max(float(np.max(np.abs(got[o].astype(np.float64) - e))) for o, e in zip(outputs, expected))
        ort_err = max(float(np.max(np.abs(g.astype(np.float64) - e)))
                      for g, e in zip(session.run(outputs, dict(feeds)), expected))
        times = interleaved({"kiln": lambda: module.run(feeds), "ort": lambda: session.run(outputs, dict(feeds))},
                            args.rounds, settle_s=0.05)
        kernels = len(artifact.report.get("kernels", []) or [])
        rows.append((name, times["kiln"], times["ort"], compile_s, err, ort_err, kernels))
        print(f"  {name}: kiln {times['kiln']:.3f} ms, onnxruntime-gpu {times['ort']:.3f} ms, max err {err:.1e} "
              f"(ORT CUDA vs CPU {ort_err:.1e})", file=sys.stderr)
        if args.profile:
            calls = sorted(module.profile(repeat=5, feeds=feeds), key=lambda c: -c["time_ms"])[: args.profile]
            for c in calls:
                print(f"      {c['time_ms']:8.3f} ms  {c['name']}", file=sys.stderr)
        module.close()

    import onnxruntime as ort

    print(f"\ntarget {args.target}, -O{args.opt_level}, {args.precision}, median of {args.rounds} interleaved rounds; "
          f"onnxruntime {ort.__version__} CUDAExecutionProvider\n")
    print("| model | Kiln ms | ORT CUDA ms | ratio (Kiln/ORT) | compile s | Kiln max abs err vs ORT CPU | ORT CUDA max abs err |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, k, o, c, e, oe, _ in rows:
        print(f"| {name} | {k:.3f} | {o:.3f} | {k / o:.2f}x | {c:.1f} | {e:.1e} | {oe:.1e} |")
    ratios = [r[1] / r[2] for r in rows]
    print(f"\ngeomean ratio: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
