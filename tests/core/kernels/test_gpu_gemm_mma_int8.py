"""The int8 tensor-core GEMM (mma.sync m16n8k32, gemm_mma_int8's plan on the float kernel's 16-bit view): its threads
emulated on this CPU with m16n8k32's own s8/u8 fragment layout give numpy's exact int32 product (and the integer
epilogue) without bank conflicts; a quantized MatMul compiled for cuda takes it where it beats dp4a and the
emulation of that very kernel on the model's constants matches the exact reference; ptxas assembles it without
spills and its SASS carries the product on IMMA; on a GPU (skipped without one) it matches numpy exactly."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import core.kernels.gemm_plan.gemm_mma as float_plan
from core.backends.cuda.schedules.gemm_mma_emulate import EmulationStats
from core.backends.cuda.schedules.gemm_mma_int8_emulate import emulate_int8
from core.codegen.cuda_kernels import gemm_library
from core.codegen.mma_gemm_int8 import build_int8_gemm
from core.codegen.nvptx import emit_ptx
from core.codegen.ptxas import assemble_with_usage, find_ptxas
from core.codegen.sass import decode_counts
from core.graph.op_defs.quantize import requantize_reference
from core.kernels.gemm_plan.gemm_mma import GemmConfig
from core.kernels.gemm_plan.gemm_mma_int8 import (Int8GemmProblem, config_error, config_space, default_config,
                                                  int8_gemm_of, prefers_mma, view)
from core.runtime.cuda_driver import gpu_available
from core.target import get_target
from tests.helpers.onnx_models import make_model

rng = np.random.default_rng(375)
CUDA = get_target("cuda")
needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed (pip install nvidia-cuda-nvcc-cu12)")
needs_gpu = pytest.mark.skipif(not gpu_available(), reason="no NVIDIA GPU and driver")
INT8_MMA = "mma.sync.aligned.m16n8k32.row.col.s32"
LIMITS = {"uint8": (0, 255), "int8": (-128, 127)}

CASES = [  # (problem, config (16-bit view units: block_k 32 = 64 int8 k), data: "random" or "extreme")
    (Int8GemmProblem(256, 256, 256, "uint8"), GemmConfig(), "random"),
    (Int8GemmProblem(200, 136, 96, "int8", "int8", bias=True, multiplier="column", zero_point=-5, lo=-128, hi=127),
     GemmConfig(block_m=64, block_n=64, block_k=16, warps_m=2, warps_n=2, stages=4), "random"),  # edges in m, n, k
    (Int8GemmProblem(64, 64, 2048, "uint8"),  # 255 x -128 over k = 2048: sums near -2^26, the int32 range's use
     GemmConfig(block_m=64, block_n=64, block_k=64, warps_m=1, warps_n=4, stages=3), "extreme"),
    (Int8GemmProblem(640, 192, 64, "uint8", "uint8", run_time_zero=True, multiplier="scalar", zero_point=7, lo=7,
                     hi=255),  # a fused Relu's range; 10 x 3 tiles, two groups of the block order
     GemmConfig(block_m=64, block_n=64, block_k=32, warps_m=2, warps_n=2, stages=2), "random"),
]


def operands(problem: Int8GemmProblem, data: str = "random"):
    """A [m, k], B n-major [n, k] and the epilogue's inputs, scaled so a requantized output spans its range."""
    lo, hi = LIMITS[problem.a_dtype]
    if data == "extreme":
        a = np.full((problem.m, problem.k), hi if problem.a_dtype == "uint8" else lo, problem.a_dtype)
        b = np.full((problem.n, problem.k), -128, np.int8)
        a[::3] = lo
    else:
        a = rng.integers(lo, hi + 1, (problem.m, problem.k)).astype(problem.a_dtype)
        b = rng.integers(-128, 128, (problem.n, problem.k)).astype(np.int8)
    zero = np.array([lo + 3], problem.a_dtype)
    correction = rng.integers(-20000, 20000, problem.n).astype(np.int32)
    spread = float(np.sqrt(problem.k)) * 80 * 80  # about the sums' spread: sqrt(k) x the operands' (~74 each)
    multiplier = (rng.uniform(0.5, 2.0, problem.n if problem.multiplier == "column" else 1) * 100 / spread)
    extras = {"correction": correction, "zero": zero, "bias": rng.integers(-5000, 5000, problem.n).astype(np.int32),
              "multiplier": multiplier.astype(np.float32)}
    return a, b, extras


def exact(problem: Int8GemmProblem, a, b, extras) -> np.ndarray:
    """numpy's int64 product, the correction, bias and ONNX Runtime's requantization order (op_defs')."""
    correction = extras["correction"].astype(np.int64)
    if problem.run_time_zero:
        correction = correction * int(extras["zero"][0])
    acc = a.astype(np.int64) @ b.astype(np.int64).T + correction + (extras["bias"] if problem.bias else 0)
    assert np.abs(acc).max() < 2 ** 31
    if not problem.multiplier:
        return acc.astype(np.int32)
    attrs = {"zero_point": problem.zero_point, "min": problem.lo, "max": problem.hi, "to": problem.out_dtype}
    return requantize_reference(acc.astype(np.int32), extras["multiplier"], attrs)


def case_id(case) -> str:
    p, cfg, data = case
    return f"{p.m}x{p.n}x{p.k}-{p.a_dtype}-{p.out_dtype}-{data}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_the_emulated_threads_give_the_exact_int8_product(case):
    problem, cfg, data = case
    assert config_error(cfg, problem, float_plan.shared_limit("sm_80")) is None
    a, b, extras = operands(problem, data)
    stats = EmulationStats()
    got = emulate_int8(problem, cfg, a, b, extras, stats)
    want = exact(problem, a, b, extras)
    assert got.dtype == want.dtype == np.dtype(problem.out_dtype)
    np.testing.assert_array_equal(got, want)
    if problem.multiplier:  # the scales spread the outputs over the range, clamped at both ends
        assert len(np.unique(got)) > 20 and {problem.lo, problem.hi} <= set(got.ravel().tolist())
    assert stats.bank_conflict_phases == 0 and stats.ldmatrix_phases > 0
    halves = view(problem)
    tiles = np.prod(float_plan.grid(cfg, halves)[:2])
    assert stats.mma == tiles * -(-halves.k // cfg.block_k) * (cfg.block_k // 16) * cfg.mi * cfg.ni * cfg.threads // 32


def test_the_emulation_catches_a_wrong_fragment(monkeypatch):
    """B's two k halves swapped (registers b0..b3 and b4..b7) give a wrong product: the exactness check can fail."""
    problem, cfg, _ = CASES[0]
    a, b, extras = operands(problem)
    address = float_plan.b_fragment_address

    def swapped(cfg, problem, warp, lane, pair, kk):
        row, chunk, trans = address(cfg, problem, warp, lane, pair, kk)
        return row, chunk ^ 1, trans

    monkeypatch.setattr(float_plan, "b_fragment_address", swapped)
    assert (emulate_int8(problem, cfg, a, b, extras) != exact(problem, a, b, extras)).mean() > 0.5


def test_configs_and_the_choice_against_dp4a():
    problem = Int8GemmProblem(4096, 4096, 4096, "int8")
    default = default_config(problem, CUDA.max_shared_bytes, 132)
    assert (default.block_m, default.block_n, default.block_k, default.split_k) == (128, 128, 32, 1)
    space = list(config_space(problem, CUDA.max_shared_bytes))
    assert default in space and len(space) > 20 and all(c.split_k == 1 for c in space)
    assert "split-K" in config_error(replace(default, split_k=2), problem, CUDA.max_shared_bytes)
    assert default_config(Int8GemmProblem(128, 768, 768), CUDA.max_shared_bytes, 132).block_m == 64  # fill the SMs
    assert prefers_mma(4096, 4096, 4096, "sm_80") and prefers_mma(512, 1024, 1024, "sm_90")
    assert not prefers_mma(4096, 4096, 4096, "sm_75")  # no m16n8k32 / cp.async: dp4a
    assert not prefers_mma(8, 4096, 4096, "sm_90")  # GEMV-like: 8 of a tile's 64 rows would be real
    assert not prefers_mma(4096, 16, 4096, "sm_90")  # 16 of a tile's 64 columns
    assert not prefers_mma(64, 256, 96, "sm_90")  # launch-bound either way
    with pytest.raises(ValueError, match="multiple of 16"):
        Int8GemmProblem(64, 64, 100)
    with pytest.raises(ValueError, match="multiplier"):
        Int8GemmProblem(64, 64, 64, out_dtype="uint8")


def qlinear_matmul_model(m: int, k: int, n: int, per_column: bool = True) -> tuple[onnx.ModelProto, dict]:
    """QLinearMatMul (uint8 x int8 -> uint8), scales spreading the outputs over the uint8 range."""
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    b_scale = (rng.uniform(0.5, 1.5, n) if per_column else np.array(1.0)).astype(np.float32) * 0.01
    y_scale = np.float32(0.01 * 0.02 * np.sqrt(k) * 80 * 70 / 100)
    inits = [numpy_helper.from_array(v, name) for name, v in (
        ("a_scale", np.array(0.02, np.float32)), ("a_zero", np.array(131, np.uint8)), ("w", w), ("w_scale", b_scale),
        ("w_zero", np.zeros(b_scale.shape, np.int8)), ("y_scale", np.array(y_scale, np.float32)),
        ("y_zero", np.array(120, np.uint8)))]
    node = helper.make_node("QLinearMatMul", ["x", "a_scale", "a_zero", "w", "w_scale", "w_zero", "y_scale", "y_zero"],
                            ["y"])
    graph = helper.make_graph([node], "qmm", [helper.make_tensor_value_info("x", TensorProto.UINT8, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [m, n])], inits)
    return make_model(graph), {"x": rng.integers(0, 256, (m, k)).astype(np.uint8)}


def matmul_integer_model(m: int, k: int, n: int) -> tuple[onnx.ModelProto, dict]:
    """MatMulInteger of int8 data (zero point -3) and int8 weights: int32 out."""
    inits = [numpy_helper.from_array(rng.integers(-128, 128, (k, n)).astype(np.int8), "w"),
             numpy_helper.from_array(np.array(-3, np.int8), "x_zero"),
             numpy_helper.from_array(np.array(0, np.int8), "w_zero")]
    node = helper.make_node("MatMulInteger", ["x", "w", "x_zero", "w_zero"], ["y"])
    graph = helper.make_graph([node], "mmi", [helper.make_tensor_value_info("x", TensorProto.INT8, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [m, n])], inits)
    return make_model(graph), {"x": rng.integers(-128, 128, (m, k)).astype(np.int8)}


def cuda_build(model: onnx.ModelProto, arch: str):
    from core.frontend import import_onnx
    from tests.backend_calls import build_executable, optimize

    target = get_target(f"cuda -arch={arch}")
    graph = optimize(import_onnx(model.SerializeToString()), 3, target)
    return graph, build_executable(graph, target), target


def emulate_model_kernel(graph, exe, feeds: dict) -> np.ndarray:
    """The int8 kernel of a one-kernel model emulated on the graph's constants and the model's input."""
    ((func, info),) = zip(exe.funcs, exe.kernels)
    problem, cfg, where = int8_gemm_of(func)
    arrays = {role: graph.constants[info.inputs[i]] if info.inputs[i] in graph.constants else feeds[info.inputs[i]]
              for role, i in where.items() if role != "c"}
    b_nk = np.asarray(arrays.pop("b")).reshape(problem.n, problem.k)
    return emulate_int8(problem, cfg, arrays.pop("a").reshape(problem.m, problem.k), b_nk, arrays)


def graph_semantics(graph, feeds: dict) -> dict:
    """The optimized graph run node by node on its ops' numpy semantics (op_defs' fold functions: exact integer
    sums, Requantize in MLAS's float32 order), Fused bodies expanded."""
    from core.graph.fold import fold_node

    values = {**graph.constants, **feeds}

    def run(g):
        values.update(g.constants)
        for node in g.nodes:
            if node.op == "Fused":
                run(node.attr("body"))
                continue
            outs = fold_node(node.op, [values.get(i) if i else None for i in node.inputs], node.attrs,
                             [g.type_of(o) for o in node.outputs])
            values.update(zip(node.outputs, outs))

    run(graph)
    return values


@pytest.mark.parametrize("build", [lambda: qlinear_matmul_model(128, 256, 192), lambda: matmul_integer_model(96, 512, 128)],
                         ids=["qlinear_matmul_u8", "matmul_integer_s8"])
def test_a_quantized_matmul_for_cuda_runs_on_int8_tensor_cores_and_its_emulation_is_exact(build):
    from core.driver.reference import reference_outputs

    model, feeds = build()
    graph, exe, target = cuda_build(model, "sm_80")
    funcs = exe.funcs
    (func,) = funcs
    found = int8_gemm_of(func)
    assert found is not None, [n.op for n in graph.nodes]
    problem = found[0]
    ptx, _ = emit_ptx(list(funcs), target)
    types = ".u8.s8" if problem.a_dtype == "uint8" else ".s8.s8"
    assert ptx.count(f"{INT8_MMA}{types}.s32") > 0 and "dp4a" not in ptx
    want = reference_outputs(model, feeds)["y"]
    got = emulate_model_kernel(graph, exe, feeds).reshape(want.shape)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, graph_semantics(graph, feeds)["y"])  # the compiled graph's ops, exactly
    if problem.multiplier:  # ONNX's float64 requantization against MLAS's float32 order: a tie may round apart
        diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
        assert diff.max() <= 1 and (diff == 0).mean() > 0.999 and len(np.unique(got)) > 100
    else:
        np.testing.assert_array_equal(got, want)
    if find_ptxas() is not None:
        for arch in ("sm_80", "sm_90"):
            usage = assemble_with_usage(emit_ptx(list(funcs), get_target(f"cuda -arch={arch}"))[0], arch)[1]
            assert usage[func.name]["spill_stores"] == 0


@pytest.mark.parametrize("shape,arch", [((8, 256, 192), "sm_80"), ((128, 256, 192), "sm_75")], ids=["gemv", "sm_75"])
def test_small_products_and_older_gpus_keep_dp4a(shape, arch):
    model, _ = qlinear_matmul_model(*shape)
    _, exe, target = cuda_build(model, arch)
    funcs = exe.funcs
    assert all(int8_gemm_of(f) is None for f in funcs)
    assert "dp4a.u32.s32" in emit_ptx(list(funcs), target)[0]


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("problem,cfg", [
    (Int8GemmProblem(2048, 2048, 4096, "uint8", "uint8", bias=True, multiplier="column", zero_point=3, lo=0, hi=255),
     GemmConfig()),
    (Int8GemmProblem(1024, 1024, 4096, "int8"), GemmConfig(block_m=64, block_n=64, block_k=64, warps_m=2, warps_n=2,
                                                           stages=4))], ids=["128x128x64B-s3-requant", "64x64x128B-s4"])
def test_ptxas_takes_it_without_spills_and_the_sass_runs_on_imma(problem, cfg, arch):
    """IMMA (decoded from the cubin) one for one with the PTX's m16n8k32, LDSM in the float kernel's proportion, no
    HMMA, no spills."""
    kernels = build_int8_gemm(problem, cfg, get_target(f"cuda -arch={arch}"))
    ptx = kernels.ptx
    per_slice = cfg.mi * cfg.ni * cfg.block_k // 16
    assert ptx.count(INT8_MMA) % per_slice == 0 and ptx.count(INT8_MMA) > 0
    cubin, usage = assemble_with_usage(ptx, arch)
    main = usage["kiln_gemm_int8"]
    assert main["spill_stores"] == main["spill_loads"] == 0 and main["registers"] <= 255
    sass = decode_counts(cubin)["kiln_gemm_int8"]
    assert sass["IMMA"] == ptx.count(INT8_MMA) and sass["HMMA"] == 0
    assert sass["LDSM"] * cfg.mi * cfg.ni == sass["IMMA"] * (cfg.mi + cfg.ni // 2)
    assert sass["LDGSTS"] == ptx.count("cp.async.cg.shared.global") > 0


@needs_gpu
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_the_kernel_matches_numpy_exactly_on_the_gpu(case):
    problem, cfg, data = case
    a, b, extras = operands(problem, data)
    kernels = build_int8_gemm(problem, cfg, CUDA)
    c = np.zeros((problem.m, problem.n), problem.out_dtype)
    arrays = {"a": a, "b": b, "c": c, **extras}
    lib = gemm_library(kernels)
    try:
        lib.call(tuple(kernels.launches), *[arrays[name] for name in kernels.params])
    finally:
        lib.close()
    np.testing.assert_array_equal(c, exact(problem, a, b, extras))


@needs_gpu
def test_a_compiled_quantized_matmul_matches_the_exact_reference_on_the_gpu(tmp_path):
    import core
    from core.driver.reference import reference_outputs
    from core.runtime import load

    model, feeds = qlinear_matmul_model(256, 512, 256)
    artifact = core.compile(model.SerializeToString(), target="cuda")
    artifact.save(tmp_path / "model.tar.gz")
    with load(tmp_path / "model.tar.gz") as module:
        got = module.run(feeds)["y"]
    graph, exe, _ = cuda_build(model, "sm_80")
    assert int8_gemm_of(exe.funcs[0]) is not None
    np.testing.assert_array_equal(got, graph_semantics(graph, feeds)["y"])  # exactly the compiled graph's ops
    want = reference_outputs(model, feeds)["y"]
    diff = np.abs(got.astype(np.int32) - want.astype(np.int32))  # MLAS's float32 requantization: a tie may differ
    assert got.dtype == want.dtype and diff.max() <= 1 and (diff == 0).mean() > 0.999
