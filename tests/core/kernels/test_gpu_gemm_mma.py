"""The tensor-core GEMM (gemm_mma's tile plan, mma_gemm's NVPTX): its threads emulated on this CPU compute numpy's
product with the fused epilogue, with every ldmatrix phase free of bank conflicts; ptxas assembles it for sm_80
and sm_90 without spills; its SASS holds HMMA, LDSM and LDGSTS in the plan's proportions; on a GPU (skipped
without one) it matches numpy."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import core.kernels.gemm_plan.gemm_mma as plan
from core.codegen.cuda_kernels import gemm_library
from core.codegen.mma_gemm import build_gemm
from core.codegen.ptxas import assemble_with_usage, find_ptxas
from core.codegen.sass import sass_counts
from core.kernels.gemm_plan.gemm_mma import (GemmConfig, GemmProblem, config_error, config_space, default_config,
                                                 shared_limit)
from core.backends.cuda.schedules.gemm_mma_emulate import EmulationStats, apply_epilogue, emulate, half_bits, to_float32
from core.runtime.cuda_driver import gpu_available
from core.target import get_target

rng = np.random.default_rng(37)
CUDA = get_target("cuda")
needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed (pip install nvidia-cuda-nvcc-cu12)")
needs_gpu = pytest.mark.skipif(not gpu_available(), reason="no NVIDIA GPU and driver")

CASES = [  # (m, n, k, dtype, out dtype, epilogue, config)
    (256, 256, 128, "float16", "float16", ("bias", "relu"), GemmConfig()),
    (200, 136, 72, "bfloat16", "float32", ("bias", "residual", "gelu"),  # edges in m, n and k: zero-filled chunks
     GemmConfig(block_m=64, block_n=64, block_k=16, warps_m=2, warps_n=2, stages=4)),
    (64, 128, 512, "float16", "float32", ("sigmoid",),  # split-K: 4 parts summed by the second kernel
     GemmConfig(block_m=64, block_n=128, block_k=64, warps_m=1, warps_n=4, stages=2, split_k=4)),
    (640, 192, 32, "float16", "float32", ("bias",),  # 10 x 3 tiles: two groups of the block order, the last short
     GemmConfig(block_m=64, block_n=64, block_k=32, warps_m=2, warps_n=2, stages=2)),
    (128, 256, 96, "float16", "bfloat16", ("residual", "relu"),
     GemmConfig(block_m=128, block_n=256, block_k=32, warps_m=2, warps_n=4, stages=2)),
    (256, 256, 320, "bfloat16", "float16", ("bias",),  # 4 stages: 64 KiB of dynamic shared memory
     GemmConfig(stages=4)),
]


def operands(problem: GemmProblem):
    a = half_bits(rng.standard_normal((problem.m, problem.k)).astype(np.float32), problem.dtype)
    b = half_bits(rng.standard_normal((problem.k, problem.n)).astype(np.float32), problem.dtype)
    extras = {"bias": rng.standard_normal(problem.n).astype(np.float32),
              "residual": rng.standard_normal((problem.m, problem.n)).astype(np.float32)}
    return a, b, extras


def reference(problem: GemmProblem, a, b, extras) -> np.ndarray:
    """numpy's product of the same half-precision values (float64 sums), then the epilogue."""
    sums = to_float32(a, problem.dtype).astype(np.float64) @ to_float32(b, problem.dtype).astype(np.float64)
    rows, cols = np.indices(sums.shape)
    return apply_epilogue(problem, sums.astype(np.float32), rows, cols, extras)


def device_array(values: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values, or uint16 bit patterns of `dtype`, as the array a kernel parameter of `dtype` takes."""
    if dtype == "float32":
        return values.astype(np.float32)
    bits = values if values.dtype == np.uint16 else half_bits(values, dtype)
    return bits.view(np.float16) if dtype == "float16" else bits


def host_values(array: np.ndarray, dtype: str) -> np.ndarray:
    return array if dtype == "float32" else to_float32(array.view(np.uint16), dtype)


def case_problem(case) -> tuple[GemmProblem, GemmConfig]:
    m, n, k, dtype, out_dtype, epilogue, cfg = case
    return GemmProblem(m, n, k, dtype, out_dtype, epilogue), cfg


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}-{c[3]}-split{c[6].split_k}")
def test_the_emulated_threads_compute_the_product_without_bank_conflicts(case):
    problem, cfg = case_problem(case)
    assert config_error(cfg, problem, shared_limit("sm_80")) is None
    a, b, extras = operands(problem)
    stats = EmulationStats()
    got = emulate(problem, cfg, a, b, extras, stats)
    np.testing.assert_allclose(got, reference(problem, a, b, extras), rtol=1e-5, atol=1e-4)
    assert stats.bank_conflict_phases == 0 and stats.ldmatrix_phases > 0
    slices = -(-problem.k // cfg.block_k)
    tiles = np.prod(plan.grid(cfg, problem)[:2])
    assert stats.mma == tiles * slices * (cfg.block_k // 16) * cfg.mi * cfg.ni * cfg.warps_m * cfg.warps_n


def test_the_emulation_catches_a_missing_swizzle_and_a_wrong_fragment(monkeypatch):
    """Without the XOR swizzle the product is still right but ldmatrix phases conflict; with B's k steps
    swapped the product is wrong: the checks above can fail."""
    problem, cfg = GemmProblem(128, 128, 64), GemmConfig()
    a, b, extras = operands(problem)
    want = reference(problem, a, b, extras)
    swizzle = plan.swizzle
    monkeypatch.setattr(plan, "swizzle", lambda row, chunk, per_row: row * per_row + chunk)
    stats = EmulationStats()
    np.testing.assert_allclose(emulate(problem, cfg, a, b, extras, stats), want, rtol=1e-5, atol=1e-4)
    assert stats.bank_conflict_phases > 0
    monkeypatch.setattr(plan, "swizzle", swizzle)
    ldmatrix_b = plan.ldmatrix_b
    monkeypatch.setattr(plan, "ldmatrix_b", lambda c, w, lane, pair, kk: ldmatrix_b(c, w, lane, pair, 1 - kk))
    assert np.abs(emulate(problem, cfg, a, b, extras) - want).max() > 1


def test_configs_the_plan_refuses_and_the_default_inside_the_space():
    problem = GemmProblem(4096, 4096, 4096)
    default = default_config(problem, CUDA.max_shared_bytes)
    assert (default.block_m, default.block_n, default.block_k, default.stages) == (128, 128, 32, 3)
    assert (default.mi, default.ni) == (4, 8)  # 4 x 8 mma tiles a warp: fragments reused in both M and N
    small = default_config(GemmProblem(128, 768, 768), CUDA.max_shared_bytes, 132, split=False)
    assert (small.block_m, small.block_n, small.stages) == (64, 64, 4)  # 24 tiles rather than 6 on 132 SMs
    narrow = default_config(GemmProblem(100352, 64, 576), CUDA.max_shared_bytes, 132, split=False)
    assert (narrow.block_m, narrow.block_n, narrow.stages) == (128, 64, 4)  # a 64-channel conv: no half-zero tiles
    space = list(config_space(problem, CUDA.max_shared_bytes))
    assert default in space and len(space) > 20 and small in config_space(GemmProblem(128, 768, 768),
                                                                          CUDA.max_shared_bytes)
    assert "shared memory" in config_error(replace(default, stages=4), problem, CUDA.max_shared_bytes)
    assert "block_k" in config_error(replace(default, block_k=128), problem, CUDA.max_shared_bytes)
    assert "warp tiles" in config_error(replace(default, warps_n=16), problem, CUDA.max_shared_bytes)
    # tall and skinny (few output tiles, deep k): the default splits k so the parts fill the GPU
    assert default_config(GemmProblem(128, 256, 8192), CUDA.max_shared_bytes).split_k > 1
    with pytest.raises(ValueError, match="multiples of 8"):
        GemmProblem(64, 60, 64)


def test_the_block_order_visits_every_tile_once_in_groups_of_tile_rows():
    problem, cfg = GemmProblem(19 * 64, 5 * 64, 64), GemmConfig(block_m=64, block_n=64, warps_m=2, warps_n=2)
    bx, by = np.meshgrid(np.arange(5), np.arange(19))
    m_tile, n_tile = plan.block_tile(cfg, problem, bx.ravel(), by.ravel())
    assert sorted(zip(m_tile.tolist(), n_tile.tolist())) == [(m, n) for m in range(19) for n in range(5)]
    assert set(m_tile[:plan.GROUP_M * 5].tolist()) == set(range(plan.GROUP_M))  # the first blocks: 8 tile rows


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("problem,cfg", [(GemmProblem(512, 512, 2048, "float16", "float16", ("bias", "relu")),
                                          GemmConfig()),
                                         (GemmProblem(64, 128, 4096, "bfloat16", "float32", ("gelu",)), CASES[2][-1])],
                         ids=["128x128x32-s3", "64x128x64-split4"])
def test_ptxas_takes_it_without_spills_and_the_sass_runs_on_tensor_cores(problem, cfg, arch):
    """Deep k (a loop LLVM does not unroll away): HMMA, LDSM and LDGSTS in the tile plan's proportions."""
    kernels = build_gemm(problem, cfg, get_target(f"cuda -arch={arch}"))
    ptx = kernels.ptx
    assert ptx.count("mma.sync.aligned.m16n8k16") == cfg.mi * cfg.ni * cfg.block_k // 16
    cubin, usage = assemble_with_usage(ptx, arch)
    main = usage["kiln_gemm"]
    assert main["spill_stores"] == main["spill_loads"] == 0 and main["registers"] <= 255
    assert main["shared_bytes"] == cfg.shared_bytes
    counts, _ = sass_counts(cubin)
    sass = counts["kiln_gemm"]
    per_slice = cfg.mi * cfg.ni * cfg.block_k // 16
    assert sass["HMMA"] > 0 and sass["HMMA"] % per_slice == 0
    assert sass["LDSM"] * cfg.mi * cfg.ni == sass["HMMA"] * (cfg.mi + cfg.ni // 2)  # each fragment feeds ni or mi mma
    copies = (cfg.a_stage_chunks + cfg.b_stage_chunks) // cfg.threads
    unrolled = sass["HMMA"] // per_slice  # mainloop bodies in the code (LLVM unrolls short known trip counts)
    assert sass["LDGSTS"] == copies * (cfg.stages - 1 + unrolled)  # the prologue's stages - 1 slices, a body's one
    assert ("kiln_gemm_reduce" in counts) == (cfg.split_k > 1)


@needs_ptxas
def test_beyond_48_kib_the_stages_live_in_dynamic_shared_memory():
    """128x256x32 in 3 stages (72 KiB): `.extern .shared`, sized by the launch, which passes the bytes."""
    problem, cfg = GemmProblem(1024, 1024, 1024), GemmConfig(block_n=256, warps_n=4, stages=3)
    assert config_error(cfg, problem, CUDA.max_shared_bytes) and not config_error(cfg, problem, shared_limit("sm_90"))
    kernels = build_gemm(problem, cfg, get_target("cuda -arch=sm_90"))
    assert ".extern .shared .align 128 .b8 kiln_gemm_tiles[]" in kernels.ptx
    assert kernels.launches["kiln_gemm"].dynamic_shared_bytes == cfg.shared_bytes == 72 * 1024
    usage = assemble_with_usage(kernels.ptx, "sm_90")[1]["kiln_gemm"]
    assert usage["shared_bytes"] == 0 and usage["spill_stores"] == 0
    with pytest.raises(ValueError, match="shared memory"):
        build_gemm(problem, cfg, get_target("cuda -arch=sm_75"))


@needs_gpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}-{c[3]}-split{c[6].split_k}")
def test_the_kernels_match_numpy_on_the_gpu(case):
    problem, cfg = case_problem(case)
    a, b, extras = operands(problem)
    got, extras = run_on_gpu(build_gemm(problem, cfg, CUDA), a, b, extras)
    tol = 1e-3 if problem.out_dtype == "float32" else 2e-2
    np.testing.assert_allclose(got, reference(problem, a, b, extras), rtol=tol, atol=tol)


def run_on_gpu(kernels, a: np.ndarray, b: np.ndarray, extras: dict) -> tuple[np.ndarray, dict]:
    """C as a GEMM's `kernels` compute it on this machine's GPU (float32 values), and `extras` as the GPU saw them
    (rounded to the output dtype)."""
    problem, cfg, out = kernels.problem, kernels.config, kernels.problem.out_dtype
    arrays = {"a": device_array(a, problem.dtype), "b": device_array(b, problem.dtype),
              **{k: device_array(v, out) for k, v in extras.items()},
              "c": device_array(np.zeros((problem.m, problem.n), np.float32), out),
              "workspace": np.zeros((cfg.split_k, problem.m, problem.n), np.float32)}
    seen = {k: host_values(arrays[k], out) for k in extras}
    lib = gemm_library(kernels)
    try:
        lib.call(tuple(kernels.launches), *[arrays[name] for name in kernels.params])
    finally:
        lib.close()
    return host_values(arrays["c"], out), seen
