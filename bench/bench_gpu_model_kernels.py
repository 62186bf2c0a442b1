"""Every kernel of a model compiled for cuda, no GPU needed: what it computes, whether it is the tensor-core GEMM
(an implicit-GEMM conv or a MatMul: its M x N x K, epilogue and tile config) or scheduled loops (a float32 conv's
are the "SIMT implicit-GEMM conv" of conv2d_pointwise.py), ptxas's registers, spills and shared memory, and its SASS counts of HMMA (mma.sync), LDSM (ldmatrix) and LDGSTS (cp.async); then how
many calls of the model run on the tensor cores. The model's graph is built as core.compile builds it.

    python bench/bench_gpu_model_kernels.py MODEL.onnx [--precision fp16|bf16] [-t "cuda -arch=sm_90"]

(a float16 model, as bench_gpu.py exports one: `bench_gpu.export(model.half(), x.half(), path)` with torch's
torchvision model; on a CPU torch traces float16 slowly: about 6 minutes for resnet50 at batch 32 here.)
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.backends import get_backend  # noqa: E402
from core.backends.cuda.schedules.conv2d_pointwise import is_implicit_gemm  # noqa: E402
from core.codegen.nvptx import emit_ptx, split_reduce_name  # noqa: E402
from core.codegen.ptxas import assemble_with_usage  # noqa: E402
from core.codegen.sass import sass_counts  # noqa: E402
from core.driver.precision import model_precision, store_weights  # noqa: E402
from core.frontend import import_onnx  # noqa: E402
from core.kernels.gemm_plan.kernel_attr import gemm_of  # noqa: E402
from core.lowering.executable import build_executable  # noqa: E402
from core.target import get_target  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--precision", choices=["fp16", "bf16"], help="Kiln's --precision (default: the model's)")
    parser.add_argument("-t", "--target", default="cuda -arch=sm_90")
    args = parser.parse_args()
    target = get_target(args.target)
    backend = get_backend(target)
    start = time.perf_counter()
    graph = import_onnx(args.model.read_bytes())
    precision = args.precision or model_precision(graph)
    graph = store_weights(backend.optimize(graph, 3, target), precision, args.precision is not None,
                          backend.weight_storage_dtypes(target), target)
    exe = build_executable(backend.finish_graph(graph, target), target, backend)
    ptx, _ = emit_ptx(list(exe.funcs), target)
    cubin, usage = assemble_with_usage(ptx, target.cpu)
    counts, how = sass_counts(cubin)
    print(f"{args.model.name}, {args.target}, precision {precision}: {len(exe.kernels)} calls of {len(exe.funcs)} "
          f"kernels; built in {time.perf_counter() - start:.0f} s; SASS read by {how}\n")
    print("| kernel | calls | path | M x N x K | epilogue | config | regs | spills | smem | HMMA | LDSM | LDGSTS |")
    print("|---|---:|---|---|---|---|---:|---:|---:|---:|---:|---:|")
    calls = collections.Counter(k.func or k.name for k in exe.kernels)
    on_tensor_cores = 0
    for func in exe.funcs:
        gemm, u, c = gemm_of(func), usage.get(func.name, {}), counts.get(func.name, {})
        if gemm is not None:
            problem, cfg, _ = gemm
            on_tensor_cores += calls[func.name]
            path = "implicit-GEMM conv" if problem.conv is not None else "GEMM"
            shape = f"{problem.m} x {problem.n} x {problem.k}"
            tile = (f"{cfg.block_m}x{cfg.block_n}x{cfg.block_k} {cfg.warps_m}x{cfg.warps_n} warps "
                    f"{cfg.stages} stages" + (f" split-K {cfg.split_k}" if cfg.split_k > 1 else ""))
            epilogue = "+".join(problem.epilogue) or "-"
        else:
            path, shape, tile, epilogue = "SIMT implicit-GEMM conv" if is_implicit_gemm(func) else "loops", "-", "-", "-"
        print(f"| {func.name} | {calls[func.name]} | {path} | {shape} | {epilogue} | {tile} | {u.get('registers', '-')} | "
              f"{u.get('spill_stores', '-')} | {u.get('shared_bytes', '-')} | {c.get('HMMA', 0)} | {c.get('LDSM', 0)} | "
              f"{c.get('LDGSTS', 0)} |")
        reduce = usage.get(split_reduce_name(func.name))
        if reduce is not None:  # a split-K GEMM's parts summed, with the epilogue, by a kernel launched after it
            print(f"| {split_reduce_name(func.name)} | {calls[func.name]} | split-K reduce | - | - | - | "
                  f"{reduce.get('registers', '-')} | {reduce.get('spill_stores', '-')} | {reduce.get('shared_bytes', '-')} "
                  f"| 0 | 0 | 0 |")
    print(f"\n{on_tensor_cores} of {len(exe.kernels)} calls on the tensor cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
