"""Per-call overhead of a Kiln run against ONNX Runtime's: for each model and thread count, in the same
interleaved rounds, ONNX Runtime's `session.run`, Kiln's `Module.run` (fresh outputs, and into `out=`
buffers), the bare `kiln_run` through ctypes (no Python checks), and the sum of the kernels' own times inside
the run (`kiln_profile`). Their differences say where the time outside kernels goes: Python (Module.run -
kiln_run) and the C entry (kiln_run - kernel sum). Models: a one-op model and one with a 64 MB output, a
500-tree depth-8 random forest at batch 1, bert_tiny (shared models) and the GPT-2-style block of gpt2_block.py.

    .venv/bin/python bench/bench_overhead.py [--models oneop relu64mb forest bert_tiny gpt2] [--threads 1 2]
                                             [--rounds 15] [--stat median|min]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_models import MODELS_DIR, interleaved  # noqa: E402

MODELS = ["oneop", "relu64mb", "forest", "bert_tiny", "gpt2"]


def one_op_model(shape: list[int]):
    """A single Relu: [1, 16] times the call itself; [4096, 4096] (64 MB out) the output's allocation too."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "one_op",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), None


def forest_model():
    """500 trees of depth 8 (bench_ml.py's forest) at batch 1."""
    from skl2onnx import to_onnx
    from sklearn.datasets import make_classification
    from sklearn.ensemble import RandomForestClassifier

    x, y = make_classification(4000, 20, n_informative=10, random_state=0)
    x = x.astype(np.float32)
    forest = RandomForestClassifier(500, max_depth=8, n_jobs=-1, random_state=0).fit(x, y)
    return to_onnx(forest, x[:1], options={"zipmap": False}), {"X": (1, 20)}


def build(name: str):
    """(ONNX model or path, input shapes to compile with or None)."""
    if name in ("oneop", "relu64mb"):
        return one_op_model([1, 16] if name == "oneop" else [4096, 4096])
    if name == "forest":
        return forest_model()
    if name == "gpt2":
        from gpt2_block import build as gpt2_block

        return gpt2_block(layers=2, seq=128, dim=384, heads=6), None
    return MODELS_DIR / f"{name}.onnx", None


def runners_for(module, session, feeds: dict) -> tuple[dict, list[float]]:
    """The timed callables, and the list kiln_profile's kernel-time sums (us) are appended to."""
    outputs = [o.name for o in session.get_outputs()]
    arrays, outs = module._prepare(feeds)
    ins, outp = module._pointer_table(arrays), module._pointer_table(outs)
    lib, handle = module._lib, module._handle
    call_ms = np.zeros(max(1, lib.kiln_num_kernel_calls()))
    kernel_sums: list[float] = []
    out = {name: np.empty_like(v) for name, v in module.run(feeds).items()}

    def profiled(buffers=(arrays, outs)):  # the tables point into these: they must outlive the runners
        lib.kiln_profile(handle, ins, outp, call_ms.ctypes.data)
        kernel_sums.append(float(call_ms.sum()) * 1e3)

    def bare(buffers=(arrays, outs)):
        lib.kiln_run(handle, ins, outp)

    return {"ort": lambda: session.run(outputs, feeds), "Module.run": lambda: module.run(feeds),
            "run(out=)": lambda: module.run(feeds, out=out), "kiln_run": bare, "kernel sum": profiled}, kernel_sums


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=MODELS, choices=MODELS)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--stat", choices=["median", "min"], default="median",
                        help="per runner: the median round, or the fastest (for a busy machine)")
    args = parser.parse_args()

    import core
    from core.driver.validate import onnxruntime_session

    rows = []
    for name in args.models:
        model, shapes = build(name)
        artifact = core.compile(model, input_shapes=shapes, benchmark=False, threads=max(args.threads))
        payload = model.read_bytes() if isinstance(model, Path) else model.SerializeToString()
        module = artifact.load()
        feeds = module.random_inputs(seed=3)
        for threads in args.threads:
            module.set_num_threads(threads)
            session = onnxruntime_session(payload, threads)
            runners, kernel_sums = runners_for(module, session, feeds)
            kernel_sums.clear()
            times = interleaved(runners, args.rounds, settle_s=0.05, stat=args.stat)
            # The kernels' own time, not the profiled call's, treated as the others: a mean per round (after
            # interleaved()'s 3 warm-up calls and 1 sizing call), then the median or fastest round.
            per_round = np.asarray(kernel_sums[4:]).reshape(args.rounds, -1).mean(axis=1)
            times["kernel sum"] = float(np.min(per_round) if args.stat == "min" else np.median(per_round)) / 1e3
            rows.append((name, threads, {k: v * 1e3 for k, v in times.items()}))
            print(f"  {name} {threads} threads: " + ", ".join(f"{k} {v * 1e3:.1f} us" for k, v in times.items()),
                  file=sys.stderr)
        module.close()

    print(f"\n{args.stat} of {args.rounds} interleaved rounds (each round >= 20 ms of back-to-back calls), "
          f"microseconds per call; Python = Module.run - kiln_run, C entry = kiln_run - kernel sum\n")
    print("| model | threads | ONNX Runtime | Module.run | run(out=) | kiln_run | kernel sum | Python | C entry | "
          "Module.run / ORT |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, threads, t in rows:
        print(f"| {name} | {threads} | {t['ort']:.1f} | {t['Module.run']:.1f} | {t['run(out=)']:.1f} | "
              f"{t['kiln_run']:.1f} | {t['kernel sum']:.1f} | {t['Module.run'] - t['kiln_run']:.1f} | "
              f"{t['kiln_run'] - t['kernel sum']:.1f} | {t['Module.run'] / t['ort']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
