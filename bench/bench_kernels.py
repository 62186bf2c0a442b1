"""Per-kernel GFLOP/s of Kiln's MatMul against ONNX Runtime's (MLAS) and numpy's (OpenBLAS) in the same run.

`python bench/bench_kernels.py [--threads 2] [--rounds 15]`: every side gets the same thread count
(OPENBLAS_NUM_THREADS before numpy loads, ORT's intra-op threads, Kiln's pool size); the sides alternate
sample by sample after a warm-up and each reports its median. Constant weights are packed at compile
time, as in a model (ORT prepacks its initializers too); the ratios are the other side's time over Kiln's.
ORT's samples include its `session.run` call from Python (a few microseconds).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rounds", type=int, default=15, help="interleaved samples per side")
    parser.add_argument("names", nargs="*", help="workloads (default: all)")
    return parser.parse_args()


ARGS = _parse() if __name__ == "__main__" else None
if ARGS is not None:  # before numpy (and OpenBLAS) start
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(ARGS.threads)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

# name, A shape, B shape, B constant (a dense layer's weight, packed at compile time)?
WORKLOADS = [
    ("dense_1024", (1024, 1024), (1024, 1024), True),
    ("dense_512", (512, 512), (512, 512), True),
    ("bert_qkv_64x128x128", (64, 128), (128, 128), True),
    ("bert_ffn1_64x128x512", (64, 128), (128, 512), True),
    ("bert_ffn2_64x512x128", (64, 512), (512, 128), True),
    ("bert_attn_2x64x64x64", (2, 64, 64), (2, 64, 64), False),
    ("resnet18_fc_1x512x1000", (1, 512), (512, 1000), True),
    ("matmul_1024_runtime_pack", (1024, 1024), (1024, 1024), False),
    # a GPT-2-style block at seq 128, dim 384 (bench/gpt2_block.py): its Linear layers and attention
    ("gpt2_ffn1_128x384x1536", (128, 384), (384, 1536), True),
    ("gpt2_ffn2_128x1536x384", (128, 1536), (1536, 384), True),
    ("gpt2_qkv_128x384x384", (128, 384), (384, 384), True),
    ("gpt2_scores_6x128x64x128", (6, 128, 64), (6, 64, 128), False),
    ("gpt2_context_6x128x128x64", (6, 128, 128), (6, 128, 64), False),
    ("gemv_1x768x3072", (1, 768), (768, 3072), True),
    # convnext_tiny's MLPs on NHWC maps: stage 1 (many rows, narrow) and stage 4 (49 rows, 9.4 MB of weights)
    ("convnext_s1_3136x96x384", (3136, 96), (96, 384), True),
    ("convnext_s4_49x768x3072", (49, 768), (768, 3072), True),
]


def _kernels(chosen, rng):
    from core.packing.panels import micro_tile, pack_weights, worth_packing
    from tests.helpers.kernel_runs import OpKernel, build_kernels
    from core.target import get_target

    target = get_target("native")
    panel, tile_rows = micro_tile(target.lanes("float32"), target.vector_registers)
    kernels, operands = [], []
    for name, a_shape, b_shape, constant in chosen:
        a, b = rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)
        m, (k, n) = a_shape[-2], b_shape[-2:]
        if constant and worth_packing(m, n, k, "float32"):  # what pack_matmul_weights does to a model
            kernels.append(OpKernel(name, "MatMul", [a, pack_weights(b, panel)],
                                    {"packed_columns": n, "tile_rows": tile_rows}))
        else:
            kernels.append(OpKernel(name, "MatMul", [a, b], {"panel": panel, "tile_rows": tile_rows}))
        operands.append((a, b))
    return build_kernels(kernels), operands


SETTLE_S = 0.3


def _ort_matmul(a: np.ndarray, b: np.ndarray, constant: bool, threads: int):
    """ONNX Runtime's MatMul on a one-node model (B an initializer when `constant`): a no-argument call."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, a.shape)]
    if not constant:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, b.shape))
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "matmul", inputs,
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(b, "b")] if constant else [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {"a": a} if constant else {"a": a, "b": b}
    return lambda: session.run(None, feeds)


def _time(fn, number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number


def main() -> None:
    args = ARGS
    chosen = [w for w in WORKLOADS if not args.names or w[0] in args.names]
    runs, operands = _kernels(chosen, np.random.default_rng(0))
    runs[0].lib.set_num_threads(args.threads)
    print(f"threads {args.threads}, {args.rounds} interleaved samples per side, medians")
    print(f"{'workload':28s} {'kiln ms':>9s} {'GFLOP/s':>8s} {'ort ms':>9s} {'GFLOP/s':>8s} {'numpy ms':>9s} "
          f"{'GFLOP/s':>8s} {'ort/kiln':>8s} {'numpy/kiln':>10s}")
    for (name, a_shape, b_shape, constant), run, (a, b) in zip(chosen, runs, operands):
        (got,) = run.run()
        np.testing.assert_allclose(got, a @ b, rtol=1e-3, atol=1e-3 * np.sqrt(a_shape[-1]))
        flops = 2 * int(np.prod(a_shape)) * b_shape[-1]
        number = max(1, int(2e7 // flops))  # calls per sample: at least ~0.1 ms of work
        ort_call = _ort_matmul(a, b, constant, args.threads)
        arrays = [*run.args, *run.outputs, *run.workspaces]
        sides = {"kiln": lambda: run.lib.time_ms(name, *arrays, repeat=1, number=number, warmup=0),
                 "ort": lambda: _time(ort_call, number) * 1e3,
                 "numpy": lambda: _time(lambda: np.matmul(a, b), number) * 1e3}
        for _ in range(3):  # warm-up: caches, page faults, every thread pool awake
            run.run(), ort_call(), a @ b
        samples: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(args.rounds):
            for side, sample in sides.items():
                # OpenBLAS's threads spin for a while after a call (and ORT's and Kiln's pools too): on 2
                # cores the side that runs next would lose its second core to them, so each starts settled.
                time.sleep(SETTLE_S)
                samples[side].append(sample())
        k_ms, o_ms, n_ms = (float(np.median(samples[side])) for side in sides)
        print(f"{name:28s} {k_ms:9.3f} {flops / k_ms / 1e6:8.1f} {o_ms:9.3f} {flops / o_ms / 1e6:8.1f} "
              f"{n_ms:9.3f} {flops / n_ms / 1e6:8.1f} {o_ms / k_ms:8.2f} {n_ms / k_ms:10.2f}")

if __name__ == "__main__":
    main()
