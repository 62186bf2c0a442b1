"""Quantized models: Kiln int8 against Kiln float32 and ONNX Runtime int8 on the same quantized model (same inputs and
thread count, warm-up, interleaved rounds); prints the table and the ratios the issue sets as goals (Kiln int8 <= 0.7x
Kiln float32, <= 1.0x ONNX Runtime int8).

    .venv/bin/python bench/bench_int8.py [--models resnet18 mobilenet_v2 squeezenet1_1] [--threads 1 2] [--rounds 15]
    .venv/bin/python bench/bench_int8.py --models zoo --threads 1 2 --clock cpu

A model is a shared one (../shared/models) or one exported to ~/.cache/kiln/real-models (bench/real_models.py);
`NAME:dynamic` quantizes it by onnxruntime.quantization.quantize_dynamic (DynamicQuantizeLinear + MatMulInteger,
int8 weights), otherwise quantize_static (QDQ, per-channel int8 weights, uint8 activations, calibrated on
--calibration seeded random inputs). `zoo` is ZOO. `--clock cpu` times the process's CPU time instead of the wall (at
one thread only: both runtimes then compute on the calling thread, and a busy machine's preemption adds nothing).
The int8 compile validates with `--validate` (default warn: on AVX2-only hosts ONNX Runtime's u8 x s8 kernels saturate,
so it is no exact oracle there); `--exact` adds each model's largest difference from onnx.reference's evaluation of the
quantized model (slow: numpy convolutions).
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
from real_models import CACHE  # noqa: E402

MODELS = ["resnet18", "mobilenet_v2", "squeezenet1_1"]
ZOO = MODELS + ["mobilenet_v3_large", "efficientnet_b0", "resnet50", "shufflenet_v2_x1_0", "bert_tiny",
                "bert_tiny:dynamic"]


def model_path(name: str) -> Path:
    for folder in (MODELS_DIR, CACHE):
        if (folder / f"{name}.onnx").exists():
            return folder / f"{name}.onnx"
    sys.exit(f"no model {name} in {MODELS_DIR} or {CACHE} (bench/real_models.py export exports them)")


def quantized_copy(path: Path, folder: Path, samples: int, dynamic: bool = False) -> Path:
    """`path` quantized: by quantize_dynamic (int8 weights), or to QDQ (per-channel int8 weights, uint8
    activations) by quantize_static on seeded random calibration inputs (integers within their Gather's range)."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic,
                                          quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from core.driver.validate import index_bounds, random_inputs
    from core.frontend import import_onnx

    prepared = folder / f"{path.stem}_prep.onnx"
    target = folder / f"{path.stem}_{'dynamic' if dynamic else 'qdq'}.onnx"
    quant_pre_process(str(path), str(prepared), skip_symbolic_shape=True)
    if dynamic:
        quantize_dynamic(str(prepared), str(target), weight_type=QuantType.QInt8)
        return target
    graph = import_onnx(path)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([random_inputs(graph, 100 + k, index_bounds(graph)) for k in range(samples)])

        def get_next(self):
            return next(self.batches, None)

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


def accuracy(kiln_int8, ort_int8, ort_fp32, graph, step: float) -> tuple[float, float]:
    """(max difference from ORT int8 over 8 seeded inputs, in quantization steps of the output, or relative to its
    range when the output is not dequantized; top-1 agreement with ORT float32 of the first output)."""
    from core.driver.validate import index_bounds, random_inputs

    diffs, agree = [], []
    for seed in range(8):
        sample = random_inputs(graph, seed, index_bounds(graph))
        ours = next(iter(kiln_int8.run(sample).values()))
        theirs = ort_int8.run(None, dict(sample))[0]
        reference = ort_fp32.run(None, dict(sample))[0]
        scale = step if np.isfinite(step) else float(np.ptp(theirs)) or 1.0
        diffs.append(float(np.abs(ours - theirs).max()) / scale)
        rows = len(ours) if ours.ndim > 1 else 1
        agree.append(np.mean(ours.reshape(rows, -1).argmax(-1) == reference.reshape(rows, -1).argmax(-1)))
    return max(diffs), float(np.mean(agree))


def exact_steps(kiln_int8, quantized: Path, graph, step: float) -> float:
    """The largest difference (in output quantization steps) between Kiln int8 and onnx.reference's evaluation of the
    quantized model, on one seeded input."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    from core.driver.validate import index_bounds, random_inputs

    sample = random_inputs(graph, 0, index_bounds(graph))
    model = onnx.load(quantized)
    for opset in model.opset_import:  # onnx.reference has Q/DQ from opset 19 on (the same for 8-bit types)
        if opset.domain in ("", "ai.onnx") and opset.version < 19:
            opset.version = 19
    theirs = ReferenceEvaluator(model).run(None, dict(sample))[0]
    ours = next(iter(kiln_int8.run(sample).values()))
    return float(np.abs(ours - theirs).max()) / (step if np.isfinite(step) else float(np.ptp(theirs)) or 1.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=MODELS, help="names, NAME:dynamic, or zoo")
    parser.add_argument("-t", "--target", default="native")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calibration", type=int, default=8, help="random calibration samples")
    parser.add_argument("--stat", choices=["median", "min"], default="median")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    parser.add_argument("--validate", choices=["error", "warn", "off"], default="warn", help="the int8 compile's")
    parser.add_argument("--exact", action="store_true", help="also compare with onnx.reference (slow)")
    args = parser.parse_args()
    if args.clock == "cpu" and args.threads != [1]:
        sys.exit("--clock cpu measures one thread only (--threads 1)")
    names = [n for name in args.models for n in (ZOO if name == "zoo" else [name])]

    import core
    from core.driver.validate import index_bounds, onnxruntime_session, random_inputs
    from core.frontend import import_onnx

    rows, failures = [], []
    with tempfile.TemporaryDirectory(prefix="kiln-int8-") as tmp:
        for name in names:
            base, _, how = name.partition(":")
            path = model_path(base)
            quantized = quantized_copy(path, Path(tmp), args.calibration, dynamic=how == "dynamic")
            graph = import_onnx(path)
            feeds = random_inputs(graph, 7, index_bounds(graph))
            modules, compile_s = {}, {}
            try:
                for label, source in (("kiln_fp32", path), ("kiln_int8", quantized)):
                    start = time.perf_counter()
                    artifact = core.compile(source, target=args.target, opt_level=3, benchmark=False,
                                            validate=True if label == "kiln_fp32" else args.validate,
                                            threads=max(args.threads))
                    compile_s[label] = time.perf_counter() - start
                    modules[label] = artifact.load()
            except Exception as error:  # noqa: BLE001 (one model's failure is a row of the table)
                failures.append((name, f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"))
                print(f"  {name}: {failures[-1][1]}", file=sys.stderr)
                continue
            exact = exact_steps(modules["kiln_int8"], quantized, graph, output_step(quantized)) if args.exact \
                else float("nan")
            for threads in args.threads:
                sessions = {"ort_fp32": onnxruntime_session(path.read_bytes(), threads),
                            "ort_int8": onnxruntime_session(quantized.read_bytes(), threads)}
                runners = {k: (lambda s: lambda: s.run(None, dict(feeds)))(s) for k, s in sessions.items()}
                for label, module in modules.items():
                    module.set_num_threads(threads)
                    runners[label] = (lambda m: lambda: m.run(feeds))(module)
                steps, agreement = accuracy(modules["kiln_int8"], sessions["ort_int8"], sessions["ort_fp32"], graph,
                                            output_step(quantized))
                times = interleaved(runners, args.rounds, stat=args.stat,
                                    clock=time.process_time if args.clock == "cpu" else time.perf_counter)
                rows.append((name, threads, times, steps, exact, agreement, compile_s))
                print(f"  {name} ({threads} threads): " + ", ".join(f"{k} {v:.2f} ms" for k, v in times.items()),
                      file=sys.stderr)
            for module in modules.values():
                module.close()

    print(f"\ntarget {args.target}, {args.stat} of {args.rounds} interleaved rounds of {args.clock} time (all four "
          "runners in the same rounds); QDQ by quantize_static (per-channel s8 weights, u8 activations), :dynamic by "
          f"quantize_dynamic; load average after the run {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores\n")
    print("| model | threads | Kiln int8 ms | Kiln fp32 ms | ORT int8 ms | ORT fp32 ms | Kiln int8 / Kiln fp32 "
          "| Kiln int8 / ORT int8 | max diff vs ORT int8 (steps, 8 inputs) | max diff vs onnx.reference (steps) "
          "| top-1 = ORT fp32 (8 inputs) | compile s (int8) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, threads, t, diff, exact, agreement, compile_s in rows:
        print(f"| {name} | {threads} | {t['kiln_int8']:.2f} | {t['kiln_fp32']:.2f} | {t['ort_int8']:.2f} | "
              f"{t['ort_fp32']:.2f} | {t['kiln_int8'] / t['kiln_fp32']:.2f}x | {t['kiln_int8'] / t['ort_int8']:.2f}x | "
              f"{diff:.2g} | {exact:.2g} | {agreement:.0%} | {compile_s['kiln_int8']:.1f} |")
    for name, reason in failures:
        print(f"| {name} | failed: {reason} |")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
