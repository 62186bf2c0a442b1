"""Per-kernel GFLOP/s of Kiln's MatMul against numpy's matmul (OpenBLAS) in the same run.

`python bench/bench_kernels.py [--threads 2] [--rounds 15]`: both sides get the same thread count
(OPENBLAS_NUM_THREADS before numpy loads, Kiln's pool size); the two alternate call by call after a
warm-up and each reports its median. Constant weights are packed at compile time, as in a model.
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
]


def _kernels(chosen, rng):
    from core.packing.panels import pack_weights, worth_packing
    from core.kernels.testing import OpKernel, build_kernels

    kernels, operands = [], []
    for name, a_shape, b_shape, constant in chosen:
        a, b = rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)
        m, (k, n) = a_shape[-2], b_shape[-2:]
        if constant and worth_packing(m, n, k, "float32"):  # what pack_matmul_weights does to a model
            kernels.append(OpKernel(name, "MatMul", [a, pack_weights(b)], {"packed_columns": n}))
        else:
            kernels.append(OpKernel(name, "MatMul", [a, b]))
        operands.append((a, b))
    return build_kernels(kernels), operands


SETTLE_S = 0.3


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
    print(f"{'workload':28s} {'kiln ms':>9s} {'GFLOP/s':>8s} {'numpy ms':>9s} {'GFLOP/s':>8s} {'ratio':>6s}")
    for (name, a_shape, b_shape, _), run, (a, b) in zip(chosen, runs, operands):
        (got,) = run.run()
        np.testing.assert_allclose(got, a @ b, rtol=1e-3, atol=1e-3 * np.sqrt(a_shape[-1]))
        flops = 2 * int(np.prod(a_shape)) * b_shape[-1]
        number = max(1, int(2e7 // flops))  # calls per sample: at least ~0.1 ms of work
        kiln, ref = [], []
        for _ in range(3):  # warm-up: caches, page faults, both thread pools awake
            run.run(), a @ b
        arrays = [*run.args, *run.outputs, *run.workspaces]
        for _ in range(args.rounds):
            # OpenBLAS's threads spin for a while after a call (and Kiln's pool too): on 2 cores the
            # side that runs next would lose its second core to them, so each side starts settled.
            time.sleep(SETTLE_S)
            kiln.append(run.lib.time_ms(name, *arrays, repeat=1, number=number, warmup=0))
            time.sleep(SETTLE_S)
            ref.append(_time(lambda: np.matmul(a, b), number) * 1e3)
        k_ms, n_ms = float(np.median(kiln)), float(np.median(ref))
        print(f"{name:28s} {k_ms:9.3f} {flops / k_ms / 1e6:8.1f} {n_ms:9.3f} {flops / n_ms / 1e6:8.1f} "
              f"{n_ms / k_ms:6.2f}")


if __name__ == "__main__":
    main()
