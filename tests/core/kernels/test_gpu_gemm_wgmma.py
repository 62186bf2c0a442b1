"""The sm_90 warpgroup GEMM (gemm_wgmma's tile plan, wgmma_gemm's NVPTX): its threads emulated on this CPU, the
operands read only through the kernel's matrix descriptors as the PTX ISA decodes them, compute numpy's product
with the fused epilogue; the emulation catches a wrong swizzle, descriptor, fragment map or pipeline depth;
ptxas assembles every config for sm_90a without spills or a serialized wgmma pipeline, and its SASS holds one
HGMMA per wgmma; a model compiled for `cuda -arch=sm_90a` runs its MatMul groups on it; on an sm_90 GPU (skipped
without one) it matches numpy at float16 and bfloat16, and the model ONNX Runtime."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnxruntime as ort
import pytest

import core.kernels.gemm_plan.gemm_wgmma as plan
from core.backends.cuda.schedules.gemm_mma_emulate import apply_epilogue, half_bits, to_float32
from core.backends.cuda.schedules.gemm_wgmma_emulate import (WgmmaStats, decode_descriptor, descriptor_matrix,
                                                             emulate, fragment_positions)
from core.codegen.nvptx import emit_ptx
from core.codegen.ptxas import assemble_with_usage, find_ptxas
from core.codegen.sass import sass_counts
from core.codegen.wgmma_gemm import build_wgmma_gemm
from core.kernels.gemm_plan.conv_mma import ConvShape
from core.kernels.gemm_plan.gemm_mma import GemmConfig, GemmProblem, conv_problem
from core.kernels.gemm_plan.gemm_wgmma import WgmmaConfig, config_error, config_space, default_config
from core.kernels.gemm_plan.kernel_attr import gemm_of
from core.lowering.executable import group_inputs
from core.runtime.cuda_driver import driver, gpu_available
from core.target import get_target
from tests.core.kernels.test_gpu_gemm_group import compiled, dense_model
from tests.core.kernels.test_gpu_gemm_mma import run_on_gpu

rng = np.random.default_rng(90)
SM90 = get_target("cuda -arch=sm_90")
needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed (pip install nvidia-cuda-nvcc-cu12)")


def sm90_gpu() -> bool:
    return gpu_available() and driver().compute_capability() == (9, 0)


needs_sm90 = pytest.mark.skipif(not sm90_gpu(), reason="no sm_90 GPU (H100/H200) and driver")

CASES = [  # (m, n, k, dtype, out dtype, B layout, epilogue, config)
    (256, 512, 256, "float16", "float16", "kn", ("bias", "relu"), WgmmaConfig()),  # the default: 2 WGs, 128x256
    (200, 136, 200, "bfloat16", "float32", "kn", ("bias", "residual", "gelu"),  # edges in m, n and k
     WgmmaConfig(block_m=64, block_n=128, warpgroups=1, stages=3)),
    (130, 264, 72, "float16", "bfloat16", "nk", ("residual", "relu"),  # K-major B ([n, k]), edges
     WgmmaConfig(block_m=128, block_n=128, warpgroups=2, stages=5)),
    (64, 128, 1024, "float16", "float32", "kn", ("sigmoid",),  # split-K: 4 parts summed by the second kernel
     WgmmaConfig(block_m=64, block_n=128, warpgroups=1, stages=6, split_k=4)),
    (256, 64, 192, "bfloat16", "bfloat16", "nk", ("bias",),  # one warpgroup, 4 wgmma tiles along m, N = 64
     WgmmaConfig(block_m=256, block_n=64, warpgroups=1, stages=4, in_flight=0)),
    (192, 200, 320, "float16", "float16", "kn", (),  # two m tiles a warpgroup; the n edge inside an N-major atom
     WgmmaConfig(block_m=256, block_n=128, warpgroups=2, stages=3, split_k=2)),
    (128, 448, 128, "bfloat16", "float32", "kn", ("bias",),  # 128x256 tiles, the second one 3 of 4 atoms wide
     WgmmaConfig(block_m=128, block_n=256, warpgroups=2, stages=3)),
]
IDS = [f"{c[0]}x{c[1]}x{c[2]}-{c[3]}-{c[5]}-{c[7].block_m}x{c[7].block_n}-wg{c[7].warpgroups}-split{c[7].split_k}"
       for c in CASES]


def case_problem(case) -> tuple[GemmProblem, WgmmaConfig]:
    m, n, k, dtype, out_dtype, layout, epilogue, cfg = case
    return GemmProblem(m, n, k, dtype, out_dtype, epilogue, b_layout=layout), cfg


def operands(problem: GemmProblem):
    a = half_bits(rng.standard_normal((problem.m, problem.k)).astype(np.float32), problem.dtype)
    b = half_bits(rng.standard_normal(problem.b_shape).astype(np.float32), problem.dtype)
    extras = {"bias": rng.standard_normal(problem.n).astype(np.float32),
              "residual": rng.standard_normal((problem.m, problem.n)).astype(np.float32)}
    return a, b, extras


def reference(problem: GemmProblem, a, b, extras) -> np.ndarray:
    """numpy's float64 product of the same half-precision values, then the epilogue in float32."""
    b_kn = to_float32(b, problem.dtype) if problem.b_layout == "kn" else to_float32(b, problem.dtype).T
    sums = to_float32(a, problem.dtype).astype(np.float64) @ b_kn.astype(np.float64)
    rows, cols = np.indices(sums.shape)
    return apply_epilogue(problem, sums.astype(np.float32), rows, cols, extras)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_emulated_warpgroups_compute_the_product_through_the_descriptors(case):
    problem, cfg = case_problem(case)
    assert config_error(cfg, problem) is None
    a, b, extras = operands(problem)
    stats = WgmmaStats()
    got = emulate(problem, cfg, a, b, extras, stats)
    np.testing.assert_allclose(got, reference(problem, a, b, extras), rtol=1e-5, atol=1e-4)
    slices = -(-problem.k // plan.BLOCK_K)
    tiles = np.prod(plan.grid(cfg, problem)[:2])
    assert stats.wgmma == tiles * slices * 4 * cfg.block_m // 64
    assert stats.copy_conflict_phases == 0 and stats.copy_phases > 0


def test_descriptors_encode_the_ptx_isa_fields():
    """The bit fields of the PTX ISA's "Matrix Descriptor Format" (its MN-major 64B bf16 example: LBO 256 halves
    encodes as 32, SBO 512 halves as 64), and the plan's A / B descriptors' strides."""
    low, high = plan.descriptor(0x1_2340, 512, 1024)
    fields = decode_descriptor(low | high << 32)
    assert fields == {"start": 0x1_2340, "leading": 512, "stride": 1024, "base_offset": 0, "swizzle": 1}
    assert (low >> 16, high & 0x3FFF) == (32, 64) and high >> 30 == 1  # 128-byte swizzle in bits 62-63
    cfg, kn = WgmmaConfig(), GemmProblem(256, 256, 256)
    a = decode_descriptor(sum(w << 32 * i for i, w in enumerate(plan.a_descriptor(cfg, 1024, 1, 1, 0, 3))))
    assert a["start"] == 1024 + cfg.a_stage_bytes + 64 * 128 + 3 * 32 and a["stride"] == 1024
    (low, high), trans = plan.b_descriptor(cfg, kn, 0, 0, 2)
    b = decode_descriptor(low | high << 32)
    assert trans == 1 and b["start"] == cfg.stages * cfg.a_stage_bytes + 2 * 16 * 128
    assert (b["leading"], b["stride"]) == (64 * 128, 1024)  # 64-wide n atoms block_k lines apart; 8-k groups
    assert plan.b_descriptor(cfg, replace(kn, b_layout="nk"), 0, 0, 2)[1] == 0


def test_the_descriptor_reads_undo_the_copies_swizzle():
    """A 64 x 64 K-major tile and a 64 x 256 N-major one copied through the plan land where wgmma's descriptors
    find each element; without the XOR the same descriptors read other elements."""
    cfg = WgmmaConfig(block_m=64, block_n=256, warpgroups=1, stages=2)
    for operand, problem, rows in (("a", GemmProblem(64, 256, 64), 64), ("b", GemmProblem(64, 256, 64), 256)):
        per_row = plan.chunks_per_row(cfg, problem, operand)
        chunks = plan.stage_chunks(cfg, operand)
        row, chunk = np.divmod(np.arange(chunks), per_row)
        smem = np.zeros(cfg.shared_bytes // 2, np.uint16)
        values = np.arange(chunks * 8, dtype=np.uint16).reshape(-1, 8)  # logical (row, chunk) -> 8 halves
        at = plan.stage_base(cfg, operand, 0) + plan.stage_offset(cfg, problem, operand, row, chunk)
        smem[at[:, None] // 2 + np.arange(8)] = values
        logical = values.reshape(-1, per_row * 8)  # [rows of the stage tile, elements]
        for kk in range(4):
            if operand == "a":
                words, n_major = plan.a_descriptor(cfg, 0, 0, 0, 0, kk), False
                want = logical[:, kk * 16:kk * 16 + 16]
            else:
                words, trans = plan.b_descriptor(cfg, problem, 0, 0, kk)
                n_major, want = bool(trans), logical[kk * 16:kk * 16 + 16, :].T
            got = descriptor_matrix(smem, words[0] | words[1] << 32, rows, n_major)
            np.testing.assert_array_equal(got, want)


def test_the_accumulator_positions_are_the_ptx_fragment():
    cfg = WgmmaConfig(block_m=128, block_n=64, warpgroups=1, stages=3)
    w, lane, reg = np.indices((4, 32, 32))
    rows, cols = fragment_positions(64)
    for tile in range(2):
        row, col = plan.accumulator_position(cfg, 0, w, lane, tile, reg)
        np.testing.assert_array_equal(row, rows + 64 * tile)
        np.testing.assert_array_equal(col, cols)
    assert len({(r, c) for r, c in zip(rows.ravel(), cols.ravel())}) == 64 * 64  # each output once


def test_the_emulation_catches_a_wrong_swizzle_fragment_or_pipeline(monkeypatch):
    problem, cfg = GemmProblem(128, 128, 512, b_layout="kn"), WgmmaConfig(block_m=64, block_n=128, warpgroups=1,
                                                                         stages=4)
    a, b, extras = operands(problem)
    want = reference(problem, a, b, extras)
    np.testing.assert_allclose(emulate(problem, cfg, a, b, extras), want, rtol=1e-5, atol=1e-4)
    offset = plan.stage_offset
    monkeypatch.setattr(plan, "stage_offset", lambda c, p, o, row, chunk: offset(c, p, o, row, chunk) & ~0x70 |
                        (chunk % 8) << 4)  # the same lines, chunks unswizzled
    assert np.abs(emulate(problem, cfg, a, b, extras) - want).max() > 1
    monkeypatch.setattr(plan, "stage_offset", offset)
    position = plan.accumulator_position
    monkeypatch.setattr(plan, "accumulator_position", lambda c, wg, w, lane, tile, reg: position(
        c, wg, w, lane, tile, reg ^ 2))  # rows g and g + 8 swapped
    assert np.abs(emulate(problem, cfg, a, b, extras) - want).max() > 1
    monkeypatch.setattr(plan, "accumulator_position", position)
    monkeypatch.setattr(WgmmaConfig, "prefetch", property(lambda c: c.stages - 1))  # copies as if none in flight
    with pytest.raises(AssertionError, match="still reads it"):
        emulate(problem, cfg, a, b, extras)


def test_configs_the_plan_refuses_and_the_default_inside_the_space():
    big = GemmProblem(4096, 4096, 4096)
    default = default_config(big)
    assert (default.block_m, default.block_n, default.warpgroups, default.split_k) == (128, 256, 2, 1)
    assert default.accumulators == 128 and default.shared_bytes <= plan.SHARED_LIMIT
    space = list(config_space(big))
    assert default in space and len(space) > 20
    small = default_config(GemmProblem(128, 768, 768))
    assert (small.block_m, small.block_n) == (64, 128) and small in config_space(GemmProblem(128, 768, 768))
    assert default_config(GemmProblem(128, 256, 16384)).split_k > 1  # tall and skinny: k split across SMs
    for m, n, k in [(1, 8, 8), (100, 24, 72), (128, 256, 33 * 64), (4096, 64, 4096), (8192, 8192, 8192)]:
        assert config_error(default_config(GemmProblem(m, n, k)), GemmProblem(m, n, k)) is None  # always runs
    assert "shared memory" in config_error(replace(default, stages=5), big)
    assert "accumulators" in config_error(WgmmaConfig(block_m=128, block_n=256, warpgroups=1), big)
    assert "in flight" in config_error(replace(default, stages=2), big)
    assert "without any" in config_error(WgmmaConfig(split_k=8), GemmProblem(256, 256, 448))  # 7 slices
    conv = conv_problem(ConvShape(1, 64, 8, 8, 64, 3, 3, 8, 8, 1, 1, 1, 1, layout="nhwc"))
    assert "convolutions" in config_error(default, conv)
    assert "float32" in config_error(default, GemmProblem(256, 256, 256, a_dtype="float32"))
    with pytest.raises(ValueError, match="no wgmma"):
        build_wgmma_gemm(big, default, get_target("cuda -arch=sm_80"))


def ptxas_configs():
    return [(GemmProblem(1024, 1024, 2048, "float16", "float16", ("bias", "relu")), WgmmaConfig()),
            (GemmProblem(1024, 1024, 2048, "bfloat16", "float32", ("gelu",), b_layout="nk"),
             WgmmaConfig(block_n=128, stages=5)),
            (GemmProblem(512, 512, 2048, "float16", "float16", ("bias", "residual")),
             WgmmaConfig(block_m=128, block_n=128, warpgroups=1, stages=4, in_flight=0)),
            (GemmProblem(64, 128, 4096, "float16", "float32", ()),
             WgmmaConfig(block_m=64, block_n=128, warpgroups=1, stages=6, split_k=4))]


@needs_ptxas
@pytest.mark.parametrize("problem,cfg", ptxas_configs(), ids=["128x256-2wg", "128x128-nk-bf16", "128x128-1wg",
                                                              "64x128-split4"])
def test_ptxas_takes_it_without_spills_or_serialization_and_the_sass_runs_hgmma(problem, cfg):
    kernels = build_wgmma_gemm(problem, cfg, SM90)
    ptx = kernels.ptx
    assert ".target sm_90a" in ptx
    per_slice = cfg.m_tiles * plan.BLOCK_K // 16
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n%dk16" % cfg.block_n) == per_slice
    cubin, usage = assemble_with_usage(ptx, "sm_90a")
    main = usage["kiln_wgmma"]
    assert main["spill_stores"] == main["spill_loads"] == 0 and main["registers"] <= 255
    assert main["wgmma_serialized"] == 0  # ptxas keeps the wgmma groups asynchronous
    assert kernels.launches["kiln_wgmma"].dynamic_shared_bytes == cfg.shared_bytes
    counts, _ = sass_counts(cubin)
    sass = counts["kiln_wgmma"]
    assert sass["HGMMA"] == per_slice and sass["HMMA"] == 0 and sass["LDSM"] == 0  # one HGMMA per wgmma
    copies = (cfg.a_stage_bytes + cfg.b_stage_bytes) // 16 // cfg.threads
    assert sass["LDGSTS"] == copies * (cfg.prefetch + 1)  # the prologue's slices and the mainloop's one
    assert ("kiln_wgmma_reduce" in counts) == (cfg.split_k > 1)


def test_the_ptx_mainloop_runs_the_emulated_pipeline_order():
    """One trip of the mainloop, as the emulation assumes it: wait for the slice's copies, make them visible to
    wgmma's async proxy, the barrier, (the next copies,) wgmma.fence, the slice's wgmma, commit, then retire all
    but `in_flight` groups; the epilogue waits for every group."""
    cfg = WgmmaConfig(block_n=128, stages=4)
    ptx = build_wgmma_gemm(GemmProblem(512, 512, 1024), cfg, SM90).ptx
    cycle = [f"cp.async.wait_group {cfg.prefetch - 1};", "fence.proxy.async.shared::cta;", "bar.sync",
             "wgmma.fence.sync.aligned;", "wgmma.mma_async", "wgmma.commit_group.sync.aligned;",
             f"wgmma.wait_group.sync.aligned {cfg.in_flight};"]
    seen = [m for line in ptx.splitlines() for m in cycle if line.strip().startswith(m)]
    trip = [m for k, m in enumerate(seen) if k == 0 or m != seen[k - 1]]  # a trip's wgmma counted once
    assert len(trip) == len(cycle) and " ".join(trip) in " ".join(cycle * 2)  # the cycle, whatever LLVM's rotation
    assert ptx.count("wgmma.wait_group.sync.aligned 0;") == 1 and ptx.count("cp.async.wait_group 0;") == 1


@needs_sm90
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_kernels_match_numpy_on_an_sm90_gpu(case):
    problem, cfg = case_problem(case)
    a, b, extras = operands(problem)
    got, extras = run_on_gpu(build_wgmma_gemm(problem, cfg, SM90), a, b, extras)
    tol = 1e-3 if problem.out_dtype == "float32" else 2e-2
    np.testing.assert_allclose(got, reference(problem, a, b, extras), rtol=tol, atol=tol)


@pytest.mark.parametrize("tail", [("bias", "Relu"), ("bias", "residual", "float32")])
def test_a_model_compiled_for_sm90a_runs_its_matmul_as_the_wgmma_kernel(tail):
    """`cuda -arch=sm_90a` turns a float16 MatMul group into the wgmma kernel (sm_90 keeps mma.sync): emulated on
    the model's own weights it matches ONNX Runtime, and its PTX holds wgmma for `.target sm_90a`."""
    model = dense_model(2, 96, 200, 136, tail)
    assert isinstance(gemm_of(compiled(model, "sm_90")[1].funcs[0])[1], GemmConfig)
    graph, exe, target = compiled(model, "sm_90a")
    (func,) = [f for f in exe.funcs if gemm_of(f) is not None]
    problem, cfg, where = gemm_of(func)
    assert isinstance(cfg, WgmmaConfig) and (problem.m, problem.n, problem.k) == (192, 136, 200)
    (fused,) = [n for n in graph.nodes if n.op == "Fused"]
    feeds = {"x": (rng.standard_normal((2, 96, 200)) * 0.5).astype(np.float16),
             "r": rng.standard_normal((2, 96, 136)).astype(np.float16)}
    arrays = [np.asarray(graph.constants[v]) if v in graph.constants else feeds[v]
              for v in group_inputs(list(fused.attr("body").nodes))]
    role = {r: arrays[i] for r, i in where.items() if r != "c"}
    extras = {r: role[r].astype(np.float32).reshape(-1, 136).squeeze(0) if r == "bias" else
              role[r].astype(np.float32).reshape(-1, 136) for r in ("bias", "residual") if r in role}
    got = emulate(problem, cfg, role["a"].reshape(-1, 200).view(np.uint16), role["b"].view(np.uint16), extras)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, {k: v for k, v in feeds.items() if k in {i.name for i in session.get_inputs()}})[0]
    got = got.astype(np.float16 if problem.out_dtype == "float16" else np.float32).astype(np.float32)
    np.testing.assert_allclose(got.reshape(want.shape), want.astype(np.float32), rtol=1e-2, atol=1e-2)
    ptx, launches = emit_ptx(list(exe.funcs), target)
    assert ".target sm_90a" in ptx and "wgmma.mma_async.sync.aligned.m64n" in ptx and "mma.sync" not in ptx
    assert launches[func.name].block == (cfg.threads, 1, 1)
    if find_ptxas() is not None:
        usage = assemble_with_usage(ptx, "sm_90a")[1][func.name]
        assert usage["spill_stores"] == 0 and usage["wgmma_serialized"] == 0


@needs_sm90
def test_a_model_compiled_for_sm90a_matches_onnxruntime_on_the_gpu(tmp_path):
    import core
    from core.runtime import load

    model, x = dense_model(2, 96, 200, 136, ("bias", "Relu")), rng.standard_normal((2, 96, 200)).astype(np.float16)
    artifact = core.compile(model.SerializeToString(), target="cuda -arch=sm_90a")
    artifact.save(tmp_path / "m.tar.gz")
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with load(tmp_path / "m.tar.gz") as module:
        got = module.run({"x": x})["y"]
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-2, atol=2e-2)
