"""What ptxas makes of Kiln's tensor-core GEMM, no GPU needed: per config and architecture, each kernel's registers,
spills and static shared memory (ptxas -v; 0 where the stages are dynamic shared memory) and its SASS counts of HMMA (mma.sync), LDSM (ldmatrix), LDGSTS (cp.async)
and BAR (cuobjdump -sass where nvdisasm is installed, else the cubin decoded: core/codegen/sass.py); then the same
for the int8 GEMM (IMMA: mma.sync m16n8k32 s8; its configs' block_k counts 16-bit units, so 32 = 64 int8 k) and the
implicit-GEMM convolution (resnet50's convs at batch 32, NCHW gathered and NHWC cp.async A); with sm_90, the
sm_90a warpgroup GEMM's configs too (core/codegen/wgmma_gemm.py: HGMMA = wgmma, and whether ptxas serialized it).

    python bench/bench_gpu_sass.py [--size 4096] [--archs sm_80 sm_90] [--no-convs] [--no-int8] [--no-float]
        [--no-wgmma]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.codegen.mma_gemm import build_gemm  # noqa: E402
from core.codegen.mma_gemm_int8 import build_int8_gemm  # noqa: E402
from core.codegen.ptxas import assemble_with_usage  # noqa: E402
from core.codegen.sass import sass_counts  # noqa: E402
from core.codegen.wgmma_gemm import build_wgmma_gemm  # noqa: E402
from core.kernels.gemm_plan.conv_mma import ConvShape  # noqa: E402
from core.kernels.gemm_plan.gemm_mma import GemmConfig, GemmProblem, conv_problem  # noqa: E402
from core.kernels.gemm_plan.gemm_mma_int8 import Int8GemmProblem  # noqa: E402
from core.kernels.gemm_plan.gemm_wgmma import WgmmaConfig  # noqa: E402
from core.target import get_target  # noqa: E402

CONFIGS = [("128x128x32 2x2 warps, 3 stages", GemmConfig()),
           ("128x256x32 2x4 warps, 2 stages", GemmConfig(block_n=256, warps_n=4, stages=2)),
           ("128x128x32 2x2 warps, 4 stages (dynamic smem)", GemmConfig(stages=4)),
           ("128x256x32 2x4 warps, 3 stages (dynamic smem)", GemmConfig(block_n=256, warps_n=4, stages=3)),
           ("256x128x32 4x2 warps, 2 stages", GemmConfig(block_m=256, warps_m=4, stages=2)),
           ("128x128x16 2x2 warps, 5 stages", GemmConfig(block_k=16, stages=5)),
           ("64x64x32 2x2 warps, 4 stages", GemmConfig(block_m=64, block_n=64, stages=4)),
           ("128x128x32, 3 stages, split-K 4", GemmConfig(split_k=4))]
WGMMA_CONFIGS = [("128x256 2 WG, 4 stages (default)", WgmmaConfig()),
                 ("128x256 2 WG, 3 stages", WgmmaConfig(stages=3)),
                 ("128x128 2 WG, 5 stages", WgmmaConfig(block_n=128, stages=5)),
                 ("128x128 1 WG, 4 stages", WgmmaConfig(block_n=128, warpgroups=1, stages=4)),
                 ("256x128 2 WG, 4 stages", WgmmaConfig(block_m=256, block_n=128, stages=4)),
                 ("64x256 1 WG, 4 stages", WgmmaConfig(block_m=64, warpgroups=1, stages=4)),
                 ("128x256 2 WG, 4 stages, none in flight", WgmmaConfig(in_flight=0)),
                 ("64x128 1 WG, 6 stages, split-K 4", WgmmaConfig(block_m=64, block_n=128, warpgroups=1, stages=6,
                                                                  split_k=4))]
PROBLEMS = [("float16", "float16", ("bias", "relu")), ("bfloat16", "bfloat16", ("bias", "residual", "gelu"))]
INT8_PROBLEMS = [("u8 x s8 -> u8 requantized", dict(a_dtype="uint8", out_dtype="uint8", bias=True, multiplier="column",
                                                    zero_point=128, lo=0, hi=255)),
                 ("s8 x s8 -> s32", dict(a_dtype="int8"))]
CONVS = [("3x3 64->64 56x56", ConvShape(32, 64, 56, 56, 64, 3, 3, 56, 56, 1, 1, 1, 1)),
         ("1x1 256->64 56x56", ConvShape(32, 256, 56, 56, 64, 1, 1, 56, 56)),
         ("3x3 s2 128->128 56x56", ConvShape(32, 128, 56, 56, 128, 3, 3, 28, 28, 2, 2, 1, 1))]


def print_rows(kernels, arch: str, what: str, config: str) -> None:
    cubin, usage = assemble_with_usage(kernels.ptx, arch)
    counts, how = sass_counts(cubin)
    for kernel, u in usage.items():
        c = counts[kernel]
        print(f"| {arch} | {what} | {config} | {kernel} | {u['registers']} | {u['spill_stores']}/{u['spill_loads']} | "
              f"{u['shared_bytes']} | {c['HMMA']} | {c.get('IMMA', 0)} | {c['LDSM']} | {c['LDGSTS']} | {c.get('LDG', 0)} | "
              f"{c['BAR']} | {how} |", flush=True)


def print_wgmma_table(size: int) -> None:
    print(f"\nwgmma GEMM {size}^3 (sm_90a PTX; B [k, n] is N-major, [n, k] K-major); dynamic shared bytes\n")
    print("| problem | B | config | kernel | regs | spills | serialized | smem | HGMMA | LDGSTS | BAR | read by |")
    print("|---|---|---|---|---:|---:|---|---:|---:|---:|---:|---|")
    target = get_target("cuda -arch=sm_90")
    for dtype, out, epilogue in PROBLEMS:
        for layout in ("kn", "nk"):
            for name, cfg in WGMMA_CONFIGS:
                kernels = build_wgmma_gemm(GemmProblem(size, size, size, dtype, out, epilogue, b_layout=layout), cfg,
                                           target)
                cubin, usage = assemble_with_usage(kernels.ptx, "sm_90a")
                counts, how = sass_counts(cubin)
                for kernel, u in usage.items():
                    c = counts[kernel]
                    print(f"| {dtype} {'+'.join(epilogue)} | {layout} | {name} | {kernel} | {u['registers']} | "
                          f"{u['spill_stores']}/{u['spill_loads']} | {'YES' if u['wgmma_serialized'] else 'no'} | "
                          f"{kernels.launches[kernel].dynamic_shared_bytes} | {c['HGMMA']} | {c['LDGSTS']} | "
                          f"{c['BAR']} | {how} |", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--archs", nargs="+", default=["sm_80", "sm_90"])
    parser.add_argument("--no-convs", action="store_true", help="no convolutions")
    parser.add_argument("--no-int8", action="store_true", help="no int8 GEMMs")
    parser.add_argument("--no-float", action="store_true", help="no float16 / bfloat16 GEMMs")
    parser.add_argument("--no-wgmma", action="store_true", help="without the sm_90a wgmma table")
    args = parser.parse_args()
    print(f"GEMM {args.size}^3, then convs; registers, spill stores/loads (bytes), static shared bytes; SASS counts\n")
    print("| arch | problem | config | kernel | regs | spills | smem | HMMA | IMMA | LDSM | LDGSTS | LDG | BAR | read by |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for arch in args.archs:
        target = get_target(f"cuda -arch={arch}")
        for dtype, out, epilogue in [] if args.no_float else PROBLEMS:
            for name, cfg in CONFIGS:
                problem = GemmProblem(args.size, args.size, args.size, dtype, out, epilogue)
                print_rows(build_gemm(problem, cfg, target), arch, f"{dtype} {'+'.join(epilogue)}", name)
        for what, fields in [] if args.no_int8 else INT8_PROBLEMS:
            problem = Int8GemmProblem(args.size, args.size, args.size, **fields)
            for name, cfg in (CONFIGS[0], CONFIGS[6]):  # 128x128 and 64x64 tiles (the int8 kernel never splits k)
                print_rows(build_int8_gemm(problem, cfg, target), arch, f"int8 {what}", name)
        for name, conv in [] if args.no_convs else CONVS:
            for layout in ("nchw", "nhwc"):
                shape = ConvShape(**{**conv.__dict__, "layout": layout})
                problem = conv_problem(shape, "float16", "float16", ("bias", "residual", "relu"))
                for label, cfg in CONFIGS[:3]:
                    print_rows(build_gemm(problem, cfg, target), arch, f"conv {name} {layout}", label)
    if "sm_90" in args.archs and not args.no_wgmma:
        print_wgmma_table(args.size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
