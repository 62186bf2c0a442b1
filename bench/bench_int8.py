"""Quantized models: Kiln int8 against Kiln float32 and ONNX Runtime int8 on the same QDQ model (same inputs and
thread count, warm-up, interleaved rounds, medians); prints the table and the ratios the issue sets as goals
(Kiln int8 <= 0.6x Kiln float32, <= 0.9x ONNX Runtime int8).

    .venv/bin/python bench/bench_int8.py [--models resnet18 mobilenet_v2 squeezenet1_1] [--threads 2] [--rounds 15]

Each shared model (../shared/models) is quantized by onnxruntime.quantization.quantize_static: QDQ format,
per-channel int8 weights, uint8 activations, calibrated on seeded random inputs (--calibration N samples).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_models import MODELS_DIR, interleaved  # noqa: E402

MODELS = ["resnet18", "mobilenet_v2", "squeezenet1_1"]


def quantized_copy(path: Path, folder: Path, samples: int) -> Path:
    """`path` quantized to QDQ (per-channel int8 weights, uint8 activations) on seeded random calibration data."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    model = onnx.load(path)
    inputs = [(i.name, [d.dim_value or 1 for d in i.type.tensor_type.shape.dim]) for i in model.graph.input
              if i.name not in {t.name for t in model.graph.initializer}]

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.batches = iter([{n: rng.standard_normal(s).astype(np.float32) for n, s in inputs}
                                 for _ in range(samples)])

        def get_next(self):
            return next(self.batches, None)

    prepared, target = folder / f"{path.stem}_prep.onnx", folder / f"{path.stem}_qdq.onnx"
    quant_pre_process(str(path), str(prepared), skip_symbolic_shape=True)
    quantize_static(str(prepared), str(target), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return target


def output_step(path: Path) -> float:
    """The quantization step (scale) of the model's first output when a DequantizeLinear produces it, else nan."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(path)
    node = next((n for n in model.graph.node if model.graph.output[0].name in n.output), None)
    scales = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    if node is None or node.op_type != "DequantizeLinear" or node.input[1] not in scales:
        return float("nan")
    return float(scales[node.input[1]])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("-t", "--target", default="native")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calibration", type=int, default=8, help="random calibration samples")
    parser.add_argument("--stat", choices=["median", "min"], default="median")
    args = parser.parse_args()

    import core
    from core.driver.validate import index_bounds, onnxruntime_session, random_inputs
    from core.frontend import import_onnx

    rows = []
    with tempfile.TemporaryDirectory(prefix="kiln-int8-") as tmp:
        for name in args.models:
            path = MODELS_DIR / f"{name}.onnx"
            qdq = quantized_copy(path, Path(tmp), args.calibration)
            graph = import_onnx(path)
            feeds = random_inputs(graph, 7, index_bounds(graph))
            sessions = {"ort_fp32": onnxruntime_session(path.read_bytes(), args.threads),
                        "ort_int8": onnxruntime_session(qdq.read_bytes(), args.threads)}
            runners = {k: (lambda s: lambda: s.run(None, dict(feeds)))(s) for k, s in sessions.items()}
            modules, compile_s = {}, {}
            for label, source in (("kiln_fp32", path), ("kiln_int8", qdq)):
                start = time.perf_counter()
                artifact = core.compile(source, target=args.target, opt_level=3, validate=True, benchmark=False,
                                        threads=args.threads)
                compile_s[label] = time.perf_counter() - start
                module = artifact.load()
                module.set_num_threads(args.threads)
                modules[label] = module
                runners[label] = (lambda m: lambda: m.run(feeds))(module)
            steps, agree = [], []
            for seed in range(8):  # accuracy on a few seeded inputs: Kiln int8 against ORT int8 and ORT fp32
                sample = random_inputs(graph, seed, index_bounds(graph))
                ours = next(iter(modules["kiln_int8"].run(sample).values()))
                theirs = sessions["ort_int8"].run(None, dict(sample))[0]
                reference = sessions["ort_fp32"].run(None, dict(sample))[0]
                steps.append(float(np.abs(ours - theirs).max()) / output_step(qdq))
                top1 = ours.reshape(len(ours), -1).argmax(-1), reference.reshape(len(ours), -1).argmax(-1)
                agree.append(np.mean(top1[0] == top1[1]))
            agreement = float(np.mean(agree))
            times = interleaved(runners, args.rounds, stat=args.stat)
            for module in modules.values():
                module.close()
            rows.append((name, times, max(steps), agreement, compile_s))
            print(f"  {name}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in times.items()), file=sys.stderr)

    print(f"\ntarget {args.target}, {args.threads} threads, {args.stat} of {args.rounds} interleaved rounds "
          "(all four runners in the same rounds); QDQ by quantize_static (per-channel s8 weights, u8 activations)\n")
    print("| model | Kiln int8 ms | Kiln fp32 ms | ORT int8 ms | ORT fp32 ms | int8/fp32 (Kiln) | Kiln int8 / ORT int8 "
          "| max diff vs ORT int8 (steps, 8 inputs) | top-1 = ORT fp32 (8 inputs) | compile s (int8) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, t, diff, agreement, compile_s in rows:
        print(f"| {name} | {t['kiln_int8']:.2f} | {t['kiln_fp32']:.2f} | {t['ort_int8']:.2f} | {t['ort_fp32']:.2f} | "
              f"{t['kiln_int8'] / t['kiln_fp32']:.2f}x | {t['kiln_int8'] / t['ort_int8']:.2f}x | {diff:.2g} | "
              f"{agreement:.0%} | {compile_s['kiln_int8']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
