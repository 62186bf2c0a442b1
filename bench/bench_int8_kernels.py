"""Int8 kernels (tensorized with the target's dot-product intrinsic, weights packed at compile time)
against Kiln's float32 kernel of the same shape, in the same run.

`python bench/bench_int8_kernels.py [--target native] [--threads 2] [--rounds 15] [names...]`: each int8
kernel is checked against the numpy integer reference first; then the two kernels alternate call by
call after a warm-up and each reports its median. The float32 side is Kiln's MatMul (constant weights
packed into panels, as pack_matmul_weights does) or Conv (its NCHW schedule); int8 is MatMulIntegerPacked /
ConvIntegerPacked with u8 activations and s8 weights, as pack_int8_weights makes them.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# name, kind, shapes: matmul (M, K, N); conv (C, H, W, O, kernel, stride, pad)
WORKLOADS = [
    ("bert_qkv_128x768x768", "matmul", (128, 768, 768)),
    ("bert_ffn_128x768x3072", "matmul", (128, 768, 3072)),
    ("dense_256x512x512", "matmul", (256, 512, 512)),
    ("resnet18_fc_1x512x1000", "matmul", (1, 512, 1000)),
    ("resnet18_conv3x3_64@56", "conv", (64, 56, 56, 64, 3, 1, 1)),
    ("resnet18_conv3x3_128@28", "conv", (128, 28, 28, 128, 3, 1, 1)),
    ("resnet18_conv3x3_256@14", "conv", (256, 14, 14, 256, 3, 1, 1)),
    ("resnet18_conv3x3_512@7", "conv", (512, 7, 7, 512, 3, 1, 1)),
    ("resnet18_conv3x3_s2_64@56", "conv", (64, 56, 56, 128, 3, 2, 1)),
    ("mobilenet_v2_pw_32to16@112", "conv", (32, 112, 112, 16, 1, 1, 0)),
    ("mobilenet_v2_pw_16to96@112", "conv", (16, 112, 112, 96, 1, 1, 0)),
    ("mobilenet_v2_pw_96to24@56", "conv", (96, 56, 56, 24, 1, 1, 0)),
    ("mobilenet_v2_pw_144to24@56", "conv", (144, 56, 56, 24, 1, 1, 0)),
    ("squeezenet_expand3x3_16to64@54", "conv", (16, 54, 54, 64, 3, 1, 1)),
]


def _pair(name, kind, shape, intrinsic, rng, weight_bound):
    """(int8 kernel, float32 kernel, numpy integer reference of the int8 one, flops)."""
    from core.graph.op_defs.integer import conv_integer_reference, matmul_integer_reference
    from tests.helpers.kernel_runs import OpKernel
    from core.packing.int8 import column_correction, conv_weights_as_columns, pack_dot_weights
    from core.packing.panels import pack_weights, worth_packing

    zero = 119
    symbol = "_" + "".join(ch if ch.isalnum() else "_" for ch in name)  # a C symbol
    if kind == "matmul":
        m, k, n = shape
        a = rng.integers(0, 256, (m, k)).astype(np.uint8)
        b = rng.integers(-weight_bound, weight_bound, (k, n)).astype(np.int8)
        q = OpKernel(f"q{symbol}", "MatMulIntegerPacked",
                     [a, pack_dot_weights(b, intrinsic.lanes, intrinsic.depth), column_correction(b, zero)],
                     {"columns": n, "depth": k, "data_shift": 0, "intrinsic": intrinsic.name})
        af, bf = a.astype(np.float32), b.astype(np.float32)
        f = (OpKernel(f"f{symbol}", "MatMul", [af, pack_weights(bf)], {"packed_columns": n})
             if worth_packing(m, n, k, "float32") else OpKernel(f"f{symbol}", "MatMul", [af, bf]))
        reference = lambda: matmul_integer_reference([a, b, np.array(zero, np.uint8)], {})[0]  # noqa: E731
        return q, f, reference, 2 * m * k * n
    c, h, w, o, r, s, p = shape
    x = rng.integers(0, 256, (1, c, h, w)).astype(np.uint8)
    wt = rng.integers(-weight_bound, weight_bound, (o, c, r, r)).astype(np.int8)
    b = conv_weights_as_columns(wt)
    attrs = {"strides": (s, s), "pads": (p, p, p, p), "dilations": (1, 1)}
    packed = [x, pack_dot_weights(b, intrinsic.lanes, intrinsic.depth), column_correction(b, zero)]
    q = OpKernel(f"q{symbol}", "ConvIntegerPacked", packed,
                 {**attrs, "kernel": (r, r), "columns": o, "data_zero_point": zero, "data_shift": 0,
                  "intrinsic": intrinsic.name})
    f = OpKernel(f"f{symbol}", "Conv", [x.astype(np.float32), wt.astype(np.float32)], {**attrs, "group": 1})
    reference = lambda: conv_integer_reference([x, wt, np.array(zero, np.uint8)], {**attrs, "group": 1})[0]  # noqa
    oh = (h + 2 * p - r) // s + 1
    return q, f, reference, 2 * o * oh * oh * c * r * r


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="native")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rounds", type=int, default=15, help="interleaved samples per side")
    parser.add_argument("--seven-bit", action="store_true",
                        help="weights within +-64 (ONNX Runtime's reduce_range), which AVX2 multiplies in pairs")
    parser.add_argument("--intrinsic", help="a dot-product intrinsic by name (default: the target's first exact one "
                        "for u8 data and s8 weights)")
    parser.add_argument("names", nargs="*", help="workloads (default: all)")
    args = parser.parse_args()

    from core.backends import resolve
    from tests.helpers.kernel_runs import build_kernels
    from core.te.intrinsics import intrinsics_for

    target, backend = resolve(args.target)
    dots = intrinsics_for(target, lambda i: i.inputs[0].dtype in ("uint8", "int16") and i.weight_dtype == "int8"
                          and (args.seven_bit or i.weight_limit is None) and args.intrinsic in (None, i.name))
    if not dots or not backend.has_device(target):
        sys.exit(f"target {target.name} has no u8 x s8 dot-product intrinsic this machine can run")
    intrinsic = dots[0]
    rng = np.random.default_rng(0)
    chosen = [wl for wl in WORKLOADS if not args.names or wl[0] in args.names]
    pairs = [_pair(*wl, intrinsic, rng, 64 if args.seven_bit else 128) for wl in chosen]
    runs = build_kernels([k for q, f, _, _ in pairs for k in (q, f)], target)
    runs[0].lib.set_num_threads(args.threads)
    print(f"target {target.name}, intrinsic {intrinsic.name}, threads {args.threads}, "
          f"{args.rounds} interleaved samples per side, medians")
    print(f"{'workload':32s} {'int8 ms':>9s} {'GOP/s':>7s} {'f32 ms':>9s} {'GFLOP/s':>8s} {'int8/f32':>9s}")
    ratios = []
    for (name, *_), (_, _, reference, flops), q_run, f_run in zip(chosen, pairs, runs[0::2], runs[1::2]):
        np.testing.assert_array_equal(q_run.run()[0], reference(), err_msg=name)
        number = max(1, int(5e7 // flops))  # calls per sample: at least ~0.1 ms of work
        samples: dict[str, list[float]] = {"q": [], "f": []}
        for side, run in (("q", q_run), ("f", f_run)) * 2:  # warm-up
            run.run()
        for _ in range(args.rounds):
            for side, run in (("q", q_run), ("f", f_run)):
                arrays = [*run.args, *run.outputs, *run.workspaces]
                time.sleep(0.05)  # the other side's threads settle first (2 cores)
                samples[side].append(run.lib.time_ms(run.kernel.name, *arrays, repeat=1, number=number, warmup=0))
        q_ms, f_ms = (float(np.median(samples[s])) for s in ("q", "f"))
        ratios.append(q_ms / f_ms)
        print(f"{name:32s} {q_ms:9.3f} {flops / q_ms / 1e6:7.0f} {f_ms:9.3f} {flops / f_ms / 1e6:8.1f} "
              f"{q_ms / f_ms:9.2f}")
    print(f"geometric mean int8/f32 latency: {float(np.exp(np.mean(np.log(ratios)))):.2f}")


if __name__ == "__main__":
    main()
