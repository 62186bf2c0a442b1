"""The cost of run-time index checks (issue 36): gather-heavy models (and bert_tiny from the shared models) compiled
with the checks (the default) and without them (indices only clamped, as before), timed interleaved in one process,
with ONNX Runtime alongside.

    .venv/bin/python bench/bench_index_checks.py [--models embedding gather_elements gather_columns] [--rounds 15]
                                                 [--threads 1] [-t x86-64-v3]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_models import MODELS_DIR, interleaved  # noqa: E402


def _model(name: str, node_fn, feeds: dict, out_shape: list[int], table: np.ndarray):
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [node_fn()], name,
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], [numpy_helper.from_array(table, "data")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), feeds


def models() -> dict:
    from onnx import helper

    import onnx

    rng = np.random.default_rng(0)
    bert = MODELS_DIR / "bert_tiny.onnx"  # a whole model: its embedding Gathers next to everything else
    whole = {"bert_tiny": (onnx.load(str(bert)), {"input_ids": rng.integers(0, 1000, (1, 64)),
                                                   "attention_mask": np.ones((1, 64), np.int64)})} if bert.exists() else {}
    return {**whole,
        # a token embedding: 512 rows of 256 floats from a 32000-row table (the check once per row)
        "embedding": _model("embedding", lambda: helper.make_node("Gather", ["data", "ids"], ["y"]),
                            {"ids": rng.integers(0, 32000, (1, 512))}, [1, 512, 256],
                            rng.standard_normal((32000, 256)).astype(np.float32)),
        # one index per element, varying along the vectorized axis (the vector check)
        "gather_elements": _model("gather_elements",
                                  lambda: helper.make_node("GatherElements", ["data", "idx"], ["y"], axis=1),
                                  {"idx": rng.integers(-1024, 1024, (256, 1024))}, [256, 1024],
                                  rng.standard_normal((256, 1024)).astype(np.float32)),
        # columns picked by index: the index varies along the inner axis too
        "gather_columns": _model("gather_columns", lambda: helper.make_node("Gather", ["data", "cols"], ["y"], axis=1),
                                 {"cols": rng.integers(0, 4096, 4096)}, [64, 4096],
                                 rng.standard_normal((64, 4096)).astype(np.float32)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=None, help="which models (default: all)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--stat", choices=["median", "min"], default="median")
    parser.add_argument("-t", "--target", default="x86-64-v3")
    args = parser.parse_args()
    os.environ["KILN_KERNEL_CACHE"] = "off"  # the two builds of a model must not share lowered kernels
    import onnxruntime as ort

    import core
    import core.runtime

    work = Path(os.environ.get("TMPDIR", "/tmp")) / "kiln-bench-index-checks"
    work.mkdir(exist_ok=True)
    print(f"{'model':<16} {'checked ms':>11} {'clamped ms':>11} {'checked/clamped':>16} {'ORT ms':>9}  ("
          f"{args.rounds} interleaved rounds, {args.stat}, {args.threads} thread(s), load {os.getloadavg()[0]:.2f})")
    for name, (model, feeds) in models().items():
        if args.models and name not in args.models:
            continue
        modules = {}
        for kind in ("checked", "clamped"):
            path = work / f"{name}-{kind}.tar.gz"
            if kind == "clamped":  # the kernels without their fault record: the check only clamps
                with mock.patch("core.te.lower.with_index_fault", lambda body, params: (body, tuple(params))):
                    core.compile(model, target=args.target).save(path)
            else:
                core.compile(model, target=args.target).save(path)
            modules[kind] = core.runtime.load(path, num_threads=args.threads)
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        want = session.run(None, feeds)[0]
        for module in modules.values():
            np.testing.assert_allclose(module.run(feeds)[session.get_outputs()[0].name], want, rtol=1e-4, atol=1e-4)
        # One thread runs on the caller: its CPU time (thread_time) is what preemption on a busy host cannot inflate.
        clock = time.thread_time if args.threads == 1 else time.perf_counter
        times = interleaved({"checked": lambda: modules["checked"].run(feeds),
                             "clamped": lambda: modules["clamped"].run(feeds),
                             "ort": lambda: session.run(None, feeds)}, args.rounds, stat=args.stat, clock=clock)
        print(f"{name:<16} {times['checked']:>11.4f} {times['clamped']:>11.4f} "
              f"{times['checked'] / times['clamped']:>16.3f} {times['ort']:>9.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
