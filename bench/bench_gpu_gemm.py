"""GEMM throughput on the GPU against cuBLAS (through PyTorch): square products 1024..8192 in float16 and bfloat16
(Kiln's tensor-core GEMM, core/codegen/mma_gemm.py: its default tiles and a few other configs of its space, up to
4 stages and 128x256 tiles in dynamic shared memory, the best kept; on sm_90 also the warpgroup GEMM,
core/codegen/wgmma_gemm.py, a few configs of its space) and float32 (Kiln's MatMul kernel as a model compiles it;
cuBLAS without TF32). Data stays on the device; times are CUDA-event medians. Each Kiln result is checked against
cuBLAS's before it is timed.

    python bench/bench_gpu_gemm.py [--sizes 1024 2048 4096 8192] [--dtypes fp16 bf16 fp32] [-t "cuda -arch=sm_90"]
                                   [--kernels mma wgmma]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
KERNELS = ("mma", "wgmma")
COLUMNS = {"mma": ("kiln_ms", "kiln_tflops", "config", "max_rel_err", "fraction"),  # a row's keys per kernel
           "wgmma": ("wgmma_ms", "wgmma_tflops", "wgmma_config", "wgmma_max_rel_err", "wgmma_fraction")}


def candidates(problem, target):
    """The default config first, then a few others of the space (wider and deeper tiles, more stages)."""
    from core.kernels.gemm_plan.gemm_mma import GemmConfig, config_error, default_config, shared_limit

    default = default_config(problem, target.max_shared_bytes, 132 if target.cpu == "sm_90" else 108)
    wide, tall = GemmConfig(block_n=256, warps_n=4), GemmConfig(block_m=256, warps_m=4)
    others = [replace(default, stages=4), replace(wide, stages=3), replace(tall, stages=3), replace(wide, stages=4),
              GemmConfig(block_k=64, stages=3), replace(wide, stages=2), GemmConfig(block_k=16, stages=5),
              replace(default, split_k=1)]
    seen, out = set(), []
    for cfg in [default, *others]:
        if cfg not in seen and config_error(cfg, problem, shared_limit(target.cpu)) is None:
            seen.add(cfg)
            out.append(cfg)
    return out


def wgmma_candidates(problem):
    """The wgmma kernel's default config first, then a few others (tile shapes, stages, groups in flight)."""
    from core.kernels.gemm_plan.gemm_wgmma import WgmmaConfig, config_error, default_config

    default = default_config(problem)
    others = [WgmmaConfig(stages=3), WgmmaConfig(block_n=128, stages=5), WgmmaConfig(block_m=256, block_n=128),
              WgmmaConfig(in_flight=0), WgmmaConfig(block_n=128, warpgroups=1, stages=4)]
    out = []
    for cfg in [default, *others]:
        if cfg not in out and config_error(cfg, problem) is None:
            out.append(cfg)
    return out


def _build(args):
    from core.codegen.mma_gemm import build_gemm
    from core.codegen.wgmma_gemm import build_wgmma_gemm
    from core.kernels.gemm_plan.gemm_wgmma import WgmmaConfig
    from core.target import get_target

    problem, cfg, target_name = args
    build = build_wgmma_gemm if isinstance(cfg, WgmmaConfig) else build_gemm
    return build(problem, cfg, get_target(target_name))


def torch_ms(fn, repeat: int = 20, warmup: int = 3) -> float:
    import torch

    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop))
    return statistics.median(samples)


def kiln_half(size: int, dtype: str, target, pool, a_bits, b_bits, want,
              wgmma: bool = False) -> tuple[float, str, float]:
    """(best ms, its config, its max relative error against cuBLAS) of the mma.sync kernel, or of the wgmma one."""
    from core.kernels.gemm_plan.gemm_mma import GemmProblem

    problem = GemmProblem(size, size, size, dtype, dtype)
    np_dtype = np.float16 if dtype == "float16" else np.uint16
    c = np.zeros((size, size), np_dtype)
    read = (lambda: c.astype(np.float32)) if dtype == "float16" else (lambda: (c.astype(np.uint32) << 16).view(np.float32))
    configs = wgmma_candidates(problem) if wgmma else candidates(problem, target)
    return fastest(problem, configs, target, pool, {"a": a_bits.view(np_dtype), "b": b_bits.view(np_dtype), "c": c},
                   read, want, f"{dtype} {size}{' wgmma' if wgmma else ''}")


def fastest(problem, configs, target, pool, arrays: dict, read, want: np.ndarray, label: str) -> tuple[float, str, float]:
    """(best ms, its config, its max relative error) of `problem`'s kernels under each of `configs` (built in
    `pool`), run on `arrays` (by parameter name; the split-K workspace is added), `read()` giving the output as
    float32 to check against `want` before timing; a wrong config is reported and skipped."""
    from core.codegen.cuda_kernels import gemm_library

    best = (float("inf"), "", float("nan"))
    spec = f"{target.name} -arch={target.cpu}"  # the builders' processes rebuild the very target
    for cfg, kernels in zip(configs, pool.map(_build, [(problem, c, spec) for c in configs])):
        lib = gemm_library(kernels)
        try:
            arrays["workspace"] = np.zeros((cfg.split_k, problem.m, problem.n), np.float32)
            args = [arrays[p] for p in kernels.params]
            names = tuple(kernels.launches)
            lib.call(names, *args)
            err = float(np.max(np.abs(read() - want)) / max(1e-6, float(np.max(np.abs(want)))))
            if err > 2e-2:
                print(f"  {label}: config {cfg} is WRONG (max rel err {err:.1e}); skipped", file=sys.stderr)
                continue
            ms = lib.time_ms(names, *args, repeat=20, warmup=3)
        finally:
            lib.close()
        if ms < best[0]:
            best = (ms, json.dumps(cfg.to_json(), separators=(",", ":")), err)
    return best


def kiln_float32(size: int, target, a, b, want) -> tuple[float, str, float]:
    """Kiln's float32 MatMul kernel as a one-node model compiles it (the SIMT schedule)."""
    import onnx
    from onnx import helper

    from core.codegen.cuda_kernels import load_cuda_kernels
    from core.frontend import import_onnx
    from core.backends import get_backend
    from core.lowering.executable import build_executable

    f = onnx.TensorProto.FLOAT
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "mm",
                              [helper.make_tensor_value_info("a", f, [size, size]),
                               helper.make_tensor_value_info("b", f, [size, size])],
                              [helper.make_tensor_value_info("c", f, [size, size])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    backend = get_backend(target)
    exe = build_executable(backend.optimize(import_onnx(model.SerializeToString()), 3, target), target, backend)
    (func,) = exe.funcs
    lib = load_cuda_kernels([func], target)
    try:
        c = np.zeros((size, size), np.float32)
        lib.call(func.name, a, b, c)
        err = float(np.max(np.abs(c - want)) / max(1e-6, float(np.max(np.abs(want)))))
        return lib.time_ms(func.name, a, b, c, repeat=10, warmup=2), func.name, err
    finally:
        lib.close()


def run(sizes, dtypes, target_name: str, json_path: Path | None = None, kernels=KERNELS) -> list[dict]:
    """The table's rows (also written to `json_path` after each, so a run cut short keeps what it measured);
    `kernels`: "mma" (the mma.sync GEMM, float32's MatMul kernel) and/or "wgmma" (sm_90, half precision)."""
    import torch

    from core.target import get_target

    torch.backends.cuda.matmul.allow_tf32 = False
    target = get_target(target_name)
    rows = []
    with ProcessPoolExecutor(max_workers=8, mp_context=multiprocessing.get_context("spawn")) as pool:
        for key in dtypes:
            dtype = DTYPES[key]
            for size in sizes:
                tdtype = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
                ta = torch.randn(size, size, device="cuda").to(tdtype)
                tb = torch.randn(size, size, device="cuda").to(tdtype)
                tc = torch.empty(size, size, device="cuda", dtype=tdtype)
                cublas = torch_ms(lambda: torch.matmul(ta, tb, out=tc))
                want = torch.matmul(ta.float(), tb.float()).cpu().numpy()
                flops = 2.0 * size ** 3
                row = {"dtype": key, "size": size, "cublas_ms": cublas, "cublas_tflops": flops / cublas / 1e9}
                bits = lambda t: t.cpu().view(torch.int16).numpy().view(np.uint16)  # noqa: E731
                for kind in kernels:
                    if kind == "wgmma" and (dtype == "float32" or target.cpu != "sm_90"):
                        continue
                    if dtype == "float32":
                        ms, config, err = kiln_float32(size, target, ta.cpu().numpy(), tb.cpu().numpy(), want)
                    else:
                        ms, config, err = kiln_half(size, dtype, target, pool, bits(ta), bits(tb), want,
                                                    kind == "wgmma")
                    tflops = flops / ms / 1e9 if ms else 0.0
                    row.update(zip(COLUMNS[kind], (ms, tflops, config, err, tflops / row["cublas_tflops"])))
                rows.append(row)
                if json_path:
                    json_path.write_text(json.dumps(rows, indent=1))
                print(f"  {key} {size}: cuBLAS {row['cublas_tflops']:.1f} TFLOP/s, "
                      f"Kiln {row.get('kiln_tflops', 0):.1f} ({100 * row.get('fraction', 0):.0f}%) "
                      f"{row.get('config', '')}; wgmma "
                      f"{row.get('wgmma_tflops', 0.0):.1f} {row.get('wgmma_config', '')}", file=sys.stderr, flush=True)
    return rows


def print_table(rows, target_name: str) -> None:
    import torch

    print(f"\nGEMM, square, {target_name}, {torch.cuda.get_device_name()}; cuBLAS via torch {torch.__version__} "
          f"(float32 without TF32); CUDA-event medians, data on the device\n")
    print("| dtype | M=N=K | cuBLAS TFLOP/s | Kiln mma.sync TFLOP/s | mma.sync / cuBLAS | config | max rel err | "
          "Kiln wgmma TFLOP/s | wgmma / cuBLAS | wgmma config | wgmma max rel err |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|---|---:|")

    def cells(r: dict, kind: str) -> str:
        _, tflops, config, err, fraction = COLUMNS[kind]
        if tflops not in r:
            return "- | - | - | -"
        return f"{r[tflops]:.1f} | {100 * r[fraction]:.0f}% | {r[config]} | {r[err]:.1e}"

    for r in rows:
        print(f"| {r['dtype']} | {r['size']} | {r['cublas_tflops']:.1f} | {cells(r, 'mma')} | {cells(r, 'wgmma')} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", type=int, default=[1024, 2048, 4096, 8192])
    parser.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES), default=["fp16", "bf16", "fp32"])
    parser.add_argument("-t", "--target", default="cuda -arch=sm_90")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--kernels", nargs="+", choices=KERNELS, default=list(KERNELS),
                        help="Kiln's kernels to time (wgmma: sm_90, float16 and bfloat16)")
    args = parser.parse_args()
    print_table(run(args.sizes, args.dtypes, args.target, args.json, tuple(args.kernels)), args.target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
