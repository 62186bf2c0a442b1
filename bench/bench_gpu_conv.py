"""Convolution throughput on the GPU against cuDNN (through PyTorch): resnet-class float16 convs at batch 32 as
Kiln's implicit-GEMM tensor-core kernel (core/kernels/gemm_plan/conv_mma.py on gemm_mma's tiles) computes
them, in both of its layouts: NCHW (what a compiled model runs today: the input gathered element by element)
against cuDNN on NCHW tensors, and NHWC (cp.async of channel chunks) against cuDNN channels_last. A few tile
configs per conv, the best kept; each result is checked against cuDNN's before it is timed. Data stays on the
device; times are CUDA-event medians.

    python bench/bench_gpu_conv.py [-t "cuda -arch=sm_90"] [--batch 32] [--layouts nchw nhwc] [--json OUT.json]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_gpu_gemm import fastest, torch_ms  # noqa: E402

# (name, in channels, size, out channels, kernel, stride): resnet50's convs (v1.5: the stride in the 3x3), and
# resnet18's 3x3; the stem of both (3 channels, K = 147: NCHW only, with the zero tap per kernel row a compiled
# model gives it, core/backends/cuda/schedules/conv_taps.py)
CONVS = [("r50.stem", 3, 224, 64, 7, 2), ("r50.l1.reduce", 256, 56, 64, 1, 1), ("r50.l1.3x3", 64, 56, 64, 3, 1),
         ("r50.l1.expand", 64, 56, 256, 1, 1), ("r50.l2.3x3s2", 128, 56, 128, 3, 2),
         ("r50.l2.3x3", 128, 28, 128, 3, 1), ("r50.l3.3x3", 256, 14, 256, 3, 1),
         ("r50.l3.expand", 256, 14, 1024, 1, 1), ("r50.l4.3x3", 512, 7, 512, 3, 1),
         ("r18.l2.3x3", 128, 28, 128, 3, 1)]


def candidates(problem, target):
    """The default config, then 4 stages, then 2x1 warps of 64x64 (an output-channel tile of 64: resnet's narrow
    convs); three at most, as the driver JIT-compiles each one's PTX at load."""
    from core.kernels.gemm_plan.gemm_mma import GemmConfig, config_error, default_config, shared_limit

    default = default_config(problem, target.max_shared_bytes, 132 if target.cpu == "sm_90" else 108, split=False)
    out = []
    for cfg in [default, GemmConfig(stages=4), GemmConfig(block_n=64, warps_n=1, stages=4)]:
        if cfg not in out and config_error(cfg, problem, shared_limit(target.cpu)) is None:
            out.append(cfg)
    return out


def run(target_name: str, batch: int, layouts, json_path: Path | None) -> list[dict]:
    import torch

    from core.backends.cuda.schedules.conv_taps import taps_to_add
    from core.kernels.gemm_plan.conv_mma import ConvShape
    from core.kernels.gemm_plan.gemm_mma import conv_problem
    from core.target import get_target

    torch.backends.cudnn.benchmark = True
    target = get_target(target_name)
    rows = []
    with ProcessPoolExecutor(max_workers=8, mp_context=multiprocessing.get_context("spawn")) as pool:
        for name, channels, size, out_channels, kernel, stride in CONVS:
            pad = kernel // 2
            out_size = (size + 2 * pad - kernel) // stride + 1
            x = torch.randn(batch, channels, size, size, device="cuda").half()
            w = (torch.randn(out_channels, channels, kernel, kernel, device="cuda") * 0.05).half()
            flops = 2.0 * batch * out_channels * out_size * out_size * channels * kernel * kernel
            extra = taps_to_add(channels, kernel, kernel) or 0
            for layout in layouts:
                if extra and layout == "nhwc":  # channels not in 16-byte chunks
                    continue
                fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
                xt, wt = x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt)
                cudnn = torch_ms(lambda: torch.nn.functional.conv2d(xt, wt, stride=stride, padding=pad))
                want = torch.nn.functional.conv2d(x.float(), w.float(), stride=stride, padding=pad)
                shape = ConvShape(batch, channels, size, size, out_channels, kernel, kernel + extra, out_size, out_size,
                                  stride, stride, pad, pad, 1, 1, layout)
                problem = conv_problem(shape, "float16", "float16")
                if layout == "nhwc":
                    a, b, want = x.permute(0, 2, 3, 1), w.permute(0, 2, 3, 1), want.permute(0, 2, 3, 1)
                else:
                    a, b = x, w
                a = a.contiguous().cpu().numpy()
                b = torch.nn.functional.pad(b, (0, extra)).contiguous().reshape(out_channels, -1).cpu().numpy()
                want = want.contiguous().cpu().numpy()
                c = np.zeros(shape.output_shape, np.float16)
                best = fastest(problem, candidates(problem, target), target, pool, {"a": a, "b": b, "c": c},
                               lambda: c.astype(np.float32), want, f"{name} {layout}")
                row = {"conv": name, "layout": layout, "batch": batch, "cudnn_ms": cudnn, "kiln_ms": best[0],
                       "cudnn_tflops": flops / cudnn / 1e9, "kiln_tflops": flops / best[0] / 1e9,
                       "config": best[1], "max_rel_err": best[2]}
                rows.append(row)
                if json_path:
                    json_path.write_text(json.dumps(rows, indent=1))
                print(f"  {name} {layout}: cuDNN {row['cudnn_tflops']:.1f} TFLOP/s, Kiln {row['kiln_tflops']:.1f} "
                      f"{best[1]}", file=sys.stderr, flush=True)
    return rows


def print_table(rows, target_name: str) -> None:
    import torch

    print(f"\nConv float16, {target_name}, {torch.cuda.get_device_name()}; cuDNN via torch {torch.__version__} "
          f"(cudnn.benchmark); CUDA-event medians, data on the device\n")
    print("| conv | layout | batch | cuDNN ms | Kiln ms | cuDNN TFLOP/s | Kiln TFLOP/s | Kiln / cuDNN | config | max rel err |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|---:|")
    for r in rows:
        print(f"| {r['conv']} | {r['layout']} | {r['batch']} | {r['cudnn_ms']:.3f} | {r['kiln_ms']:.3f} | "
              f"{r['cudnn_tflops']:.1f} | {r['kiln_tflops']:.1f} | {100 * r['kiln_tflops'] / r['cudnn_tflops']:.0f}% | "
              f"{r['config']} | {r['max_rel_err']:.1e} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-t", "--target", default="cuda -arch=sm_90")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--layouts", nargs="+", choices=["nchw", "nhwc"], default=["nhwc", "nchw"])
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    print_table(run(args.target, args.batch, args.layouts, args.json), args.target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
