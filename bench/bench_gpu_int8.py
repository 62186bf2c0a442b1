"""int8 GEMM throughput on the GPU: Kiln's tensor-core kernel (mma.sync m16n8k32, core/codegen/mma_gemm_int8.py: its
default tiles and a few others, the best kept) against Kiln's dp4a kernel (the MatMulIntegerPacked schedule a model
gets below the switch, core/backends/cuda/schedules/integer.py) and torch._int_mm (cuBLASLt's int8 GEMM) where
PyTorch has it. s8 x s8 -> s32 on square sizes, a BERT-base FFN product and GEMV-like shapes (where dp4a should
stay ahead: gemm_mma_int8.prefers_mma). Every Kiln result is checked exactly (float64 product on the GPU) before it
is timed; times are CUDA-event medians with the data on the device. TOPS = 2 M N K / time.

    python bench/bench_gpu_int8.py [--shapes 4096x4096x4096 8x4096x4096] [-t "cuda -arch=sm_90"] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_gpu_gemm import torch_ms  # noqa: E402

SHAPES = ["1024x1024x1024", "2048x2048x2048", "4096x4096x4096", "8192x8192x8192", "4096x3072x768",
          "128x4096x4096", "8x4096x4096"]


def candidates(problem, target):
    from core.kernels.gemm_plan.gemm_mma import GemmConfig, shared_limit
    from core.kernels.gemm_plan.gemm_mma_int8 import config_error, default_config

    default = default_config(problem, target.max_shared_bytes, 132 if target.cpu == "sm_90" else 108)
    others = [replace(default, stages=4), GemmConfig(block_n=256, warps_n=4, stages=3), GemmConfig(block_k=64, stages=3),
              GemmConfig(block_m=64, block_n=64, stages=4)]
    out = []
    for cfg in [default, *others]:
        if cfg not in out and config_error(cfg, problem, shared_limit(target.cpu)) is None:
            out.append(cfg)
    return out


def _build(args):
    from core.codegen.mma_gemm_int8 import build_int8_gemm
    from core.target import get_target

    problem, cfg, target_name = args
    return build_int8_gemm(problem, cfg, get_target(target_name))


def kiln_mma(problem, target, pool, a, b_nk, want) -> tuple[float, str]:
    """(best ms, its config) of the int8 tensor-core kernel; a config whose result is not exact is reported, skipped."""
    from core.codegen.cuda_kernels import gemm_library

    arrays = {"a": a, "b": b_nk, "correction": np.zeros(problem.n, np.int32),
              "c": np.zeros((problem.m, problem.n), np.int32)}
    configs = candidates(problem, target)
    best = (float("inf"), "")
    for cfg, kernels in zip(configs, pool.map(_build, [(problem, c, target.name) for c in configs])):
        lib = gemm_library(kernels)
        try:
            args = [arrays[p] for p in kernels.params]
            lib.call(tuple(kernels.launches), *args)
            if not np.array_equal(arrays["c"], want):
                print(f"  {problem.m}x{problem.n}x{problem.k}: {cfg} is WRONG; skipped", file=sys.stderr)
                continue
            ms = lib.time_ms(tuple(kernels.launches), *args, repeat=20, warmup=3)
        finally:
            lib.close()
        if ms < best[0]:
            best = (ms, json.dumps(cfg.to_json(), separators=(",", ":")))
    return best


def kiln_dp4a(m: int, n: int, k: int, target, a, w, want) -> float:
    """The dp4a kernel of a one-node MatMulInteger model (its packed MatMul given the dp4a schedule, as a tuning
    record would: the int8 tensor-core kernel is then not built)."""
    import onnx
    from onnx import helper, numpy_helper

    from core.backends import get_backend
    from core.backends.cuda.schedules.integer import schedule_matmul_integer
    from core.codegen.cuda_kernels import load_cuda_kernels
    from core.frontend import import_onnx
    from core.lowering.executable import build_executable

    i8 = onnx.TensorProto.INT8
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["a", "w"], ["c"])], "mmi",
                              [helper.make_tensor_value_info("a", i8, [m, k])],
                              [helper.make_tensor_value_info("c", onnx.TensorProto.INT32, [m, n])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    backend = get_backend(target)
    g = backend.optimize(import_onnx(model.SerializeToString()), 3, target)
    exe = build_executable(g, target, backend, schedule_for=lambda name, node: schedule_matmul_integer)
    ((func, info),) = zip(exe.funcs, exe.kernels)
    args = [a if v == "a" else g.constants[v] for v in info.inputs] + [np.zeros((m, n), np.int32)]
    lib = load_cuda_kernels([func], target)
    try:
        lib.call(func.name, *args)
        if not np.array_equal(args[-1], want):
            print(f"  {m}x{n}x{k}: the dp4a kernel is WRONG", file=sys.stderr)
            return float("nan")
        return lib.time_ms(func.name, *args, repeat=20, warmup=3)
    finally:
        lib.close()


def run(shapes, target_name: str, json_path: Path | None = None) -> list[dict]:
    import torch

    from core.kernels.gemm_plan.gemm_mma_int8 import Int8GemmProblem, prefers_mma
    from core.target import get_target

    target = get_target(target_name)
    rows = []
    with ProcessPoolExecutor(max_workers=8, mp_context=multiprocessing.get_context("spawn")) as pool:
        for shape in shapes:
            m, n, k = (int(x) for x in shape.split("x"))
            ta = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
            tw = torch.randint(-128, 128, (k, n), dtype=torch.int8, device="cuda")
            want = (ta.double() @ tw.double()).to(torch.int32).cpu().numpy()
            try:
                tc = torch._int_mm(ta, tw)
                int_mm_ms = torch_ms(lambda: torch._int_mm(ta, tw))
                assert torch.equal(tc.cpu(), torch.from_numpy(want))
            except (AttributeError, RuntimeError) as e:  # no _int_mm, or a shape it refuses (m <= 16)
                print(f"  {shape}: torch._int_mm: {str(e).splitlines()[0][:100]}", file=sys.stderr)
                int_mm_ms = float("nan")
            a, w = ta.cpu().numpy(), tw.cpu().numpy()
            problem = Int8GemmProblem(m, n, k, "int8")
            mma_ms, config = kiln_mma(problem, target, pool, a, np.ascontiguousarray(w.T), want)
            dp4a_ms = kiln_dp4a(m, n, k, target, a, w, want)
            ops = 2.0 * m * n * k
            row = {"shape": shape, "mma_ms": mma_ms, "dp4a_ms": dp4a_ms, "torch_ms": int_mm_ms, "config": config,
                   "chosen": "mma" if prefers_mma(m, n, k, target.cpu) else "dp4a",
                   **{f"{key}_tops": ops / ms / 1e9 if ms == ms and ms > 0 else float("nan")
                      for key, ms in (("mma", mma_ms), ("dp4a", dp4a_ms), ("torch", int_mm_ms))}}
            rows.append(row)
            if json_path:
                json_path.write_text(json.dumps(rows, indent=1))
            print(f"  {shape}: mma {row['mma_tops']:.1f} TOPS, dp4a {row['dp4a_tops']:.1f}, torch._int_mm "
                  f"{row['torch_tops']:.1f}; Kiln picks {row['chosen']}", file=sys.stderr, flush=True)
    return rows


def print_table(rows, target_name: str) -> None:
    import torch

    print(f"\nint8 GEMM (s8 x s8 -> s32), {target_name}, {torch.cuda.get_device_name()}, torch {torch.__version__}; "
          f"CUDA-event medians, data on the device; every Kiln result exact\n")
    print("| M x N x K | Kiln mma TOPS | Kiln dp4a TOPS | torch._int_mm TOPS | mma / dp4a | mma / torch | Kiln picks | "
          "mma config |")
    print("|---|---:|---:|---:|---:|---:|---|---|")
    for r in rows:
        print(f"| {r['shape']} | {r['mma_tops']:.1f} | {r['dp4a_tops']:.1f} | {r['torch_tops']:.1f} | "
              f"{r['mma_tops'] / r['dp4a_tops']:.2f} | {r['mma_tops'] / r['torch_tops']:.2f} | {r['chosen']} | "
              f"{r['config']} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=SHAPES, help="MxNxK")
    parser.add_argument("-t", "--target", default="cuda -arch=sm_90")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    print_table(run(args.shapes, args.target, args.json), args.target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
