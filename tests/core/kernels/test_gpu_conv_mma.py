"""Implicit-GEMM convolution on the tensor-core GEMM (conv_mma.py's geometry on gemm_mma's tile plan): its threads
emulated on this CPU match a float64 convolution of the same half-precision values, and ONNX Runtime, for 1x1,
3x3 stride 1 and 2, padded and dilated convs in NCHW (gathered A) and NHWC (cp.async A), with the fused epilogue;
the PTX holds mma.sync, ldmatrix and cp.async; ptxas takes it without spills; on a GPU (skipped without one) it
matches the reference."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from core.codegen.cuda_kernels import gemm_library
from core.codegen.mma_gemm import build_gemm
from core.codegen.ptxas import assemble_with_usage, find_ptxas
from core.codegen.sass import sass_counts
from core.kernels.gemm_plan.conv_mma import ConvShape
from core.kernels.gemm_plan.gemm_mma import (GemmConfig, GemmProblem, config_error, conv_problem,
                                                 default_config, shared_limit)
from core.backends.cuda.schedules.gemm_mma_emulate import EmulationStats, apply_epilogue, emulate, half_bits, to_float32
from core.runtime.cuda_driver import gpu_available
from core.target import get_target
from tests.helpers.onnx_models import make_model

rng = np.random.default_rng(3737)
needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed (pip install nvidia-cuda-nvcc-cu12)")
needs_gpu = pytest.mark.skipif(not gpu_available(), reason="no NVIDIA GPU and driver")
SMALL = GemmConfig(block_m=64, block_n=64, block_k=32, warps_m=2, warps_n=2, stages=3)


def conv(batch, channels, size, out_channels, kernel, stride=1, pad=0, dilation=1, layout="nchw") -> ConvShape:
    out = (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    return ConvShape(batch, channels, size, size, out_channels, kernel, kernel, out, out, stride, stride, pad, pad,
                     dilation, dilation, layout)


CASES = [  # (conv, operand dtype, output dtype, epilogue, config)
    (conv(2, 32, 7, 40, 1), "float16", "float32", ("bias",), SMALL),  # 1x1: 98 rows, a short last tile
    (conv(2, 16, 9, 24, 3, pad=1), "float16", "float16", ("bias", "residual", "relu"), SMALL),
    (conv(1, 24, 11, 16, 3, stride=2, pad=1), "bfloat16", "float32", ("relu",),
     GemmConfig(block_m=64, block_n=64, block_k=16, warps_m=2, warps_n=2, stages=4)),
    (conv(2, 8, 10, 32, 3, pad=2, dilation=2), "float16", "float32", ("bias", "relu6"), SMALL),
    (conv(1, 64, 8, 64, 3, pad=1), "float16", "float32", ("sigmoid",),  # split-K: the parts summed by the reduce
     GemmConfig(block_m=64, block_n=64, block_k=32, warps_m=2, warps_n=2, stages=2, split_k=3)),
]
LAYOUT_CASES = [(c[0].__class__(**{**c[0].__dict__, "layout": layout}), *c[1:])
                for c in CASES for layout in ("nchw", "nhwc")]


def case_id(case) -> str:
    c = case[0]
    return f"{c.layout}-{c.kernel_h}x{c.kernel_w}s{c.stride_h}p{c.pad_h}d{c.dilation_h}-{case[1]}-split{case[4].split_k}"


def reference_conv(x: np.ndarray, w: np.ndarray, c: ConvShape) -> np.ndarray:
    """NCHW x, OIHW w: the convolution in float64 (a sum of shifted strided views times each tap's weights)."""
    padded = np.zeros((c.batch, c.channels, c.height + 2 * c.pad_h + c.stride_h * c.out_h,
                       c.width + 2 * c.pad_w + c.stride_w * c.out_w))
    padded[:, :, c.pad_h:c.pad_h + c.height, c.pad_w:c.pad_w + c.width] = x
    out = np.zeros((c.batch, c.out_channels, c.out_h, c.out_w))
    for i in range(c.kernel_h):
        for j in range(c.kernel_w):
            r, s = i * c.dilation_h, j * c.dilation_w
            patch = padded[:, :, r:r + c.stride_h * c.out_h:c.stride_h, s:s + c.stride_w * c.out_w:c.stride_w]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j].astype(np.float64))
    return out


def operands(c: ConvShape, dtype: str):
    """(x bits in the conv's layout, weight bits as [OC, K], x and w as NCHW / OIHW float32 values, extras)."""
    x = half_bits(rng.standard_normal((c.batch, c.channels, c.height, c.width)).astype(np.float32), dtype)
    w = half_bits((rng.standard_normal((c.out_channels, c.channels, c.kernel_h, c.kernel_w)) * 0.2)
                  .astype(np.float32), dtype)
    extras = {"bias": rng.standard_normal(c.out_channels).astype(np.float32),
              "residual": rng.standard_normal(c.output_shape).astype(np.float32)}
    if c.layout == "nhwc":
        x_arg, w_arg = x.transpose(0, 2, 3, 1), w.transpose(0, 2, 3, 1)
    else:
        x_arg, w_arg = x, w
    return (np.ascontiguousarray(x_arg), np.ascontiguousarray(w_arg).reshape(c.out_channels, -1),
            to_float32(x, dtype), to_float32(w, dtype), extras)


def reference(problem: GemmProblem, x, w, extras) -> np.ndarray:
    """The float64 convolution of the same half values, then the epilogue, in the conv's output layout."""
    c = problem.conv
    sums = reference_conv(x, w, c)
    if c.layout == "nhwc":
        sums = sums.transpose(0, 2, 3, 1)
    out_channel = np.indices(sums.shape)[1 if c.layout == "nchw" else 3]
    return apply_epilogue(problem, sums.astype(np.float32), None, out_channel, extras)


@pytest.mark.parametrize("case", LAYOUT_CASES, ids=case_id)
def test_the_emulated_conv_matches_the_float64_convolution_without_bank_conflicts(case):
    c, dtype, out_dtype, epilogue, cfg = case
    problem = conv_problem(c, dtype, out_dtype, epilogue)
    assert config_error(cfg, problem, shared_limit("sm_80")) is None
    x_arg, w_arg, x, w, extras = operands(c, dtype)
    stats = EmulationStats()
    got = emulate(problem, cfg, x_arg, w_arg, extras, stats)
    assert got.shape == c.output_shape
    np.testing.assert_allclose(got, reference(problem, x, w, extras), rtol=1e-4, atol=1e-4)
    assert stats.bank_conflict_phases == 0 and stats.mma > 0


def test_a_float32_input_is_rounded_to_the_operand_dtype_as_it_is_copied():
    """--precision fp16 keeps activations float32: the kernel reads them and rounds to float16 on the way."""
    for layout in ("nchw", "nhwc"):
        c = conv(2, 16, 9, 24, 3, pad=1, layout=layout)
        problem = conv_problem(c, "float16", "float32", ("bias",), a_dtype="float32")
        x32 = rng.standard_normal((2, 16, 9, 9)).astype(np.float32)
        _, w_arg, _, w, extras = operands(c, "float16")
        x_arg = x32 if layout == "nchw" else np.ascontiguousarray(x32.transpose(0, 2, 3, 1))
        got = emulate(problem, SMALL, x_arg, w_arg, extras)
        x16 = x32.astype(np.float16).astype(np.float32)
        np.testing.assert_allclose(got, reference(problem, x16, w, extras), rtol=1e-4, atol=1e-4)


def test_the_emulation_catches_a_wrong_padding_test(monkeypatch):
    """A padding test that forgets the top/left border (negative coordinates pass) reads wrong taps: caught."""
    import core.kernels.gemm_plan.conv_mma as geometry

    c = conv(1, 16, 6, 16, 3, pad=1)
    problem = conv_problem(c, "float16", "float32")
    x_arg, w_arg, x, w, extras = operands(c, "float16")
    want = reference(problem, x, w, {})
    np.testing.assert_allclose(emulate(problem, SMALL, x_arg, w_arg), want, rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(geometry, "below", lambda value, bound: (np.asarray(value) < bound).astype(np.int64))
    assert np.abs(emulate(problem, SMALL, x_arg, w_arg) - want).max() > 0.1


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_the_emulated_conv_matches_onnxruntime(layout):
    """A float16 Conv with bias and Relu as ONNX Runtime runs it (NCHW), Kiln's kernel in either layout."""
    c = conv(2, 32, 14, 48, 3, stride=2, pad=1, layout=layout)
    x = rng.standard_normal((2, 32, 14, 14)).astype(np.float16)
    w = (rng.standard_normal((48, 32, 3, 3)) * 0.1).astype(np.float16)
    bias = (rng.standard_normal(48) * 0.1).astype(np.float16)
    f16 = onnx.TensorProto.FLOAT16
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "bias"], ["t"], pads=[1, 1, 1, 1], strides=[2, 2]),
         helper.make_node("Relu", ["t"], ["y"])], "conv",
        [helper.make_tensor_value_info("x", f16, [2, 32, 14, 14])],
        [helper.make_tensor_value_info("y", f16, [2, 48, 7, 7])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "bias")])
    model = make_model(graph)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    problem = conv_problem(c, "float16", "float16", ("bias", "relu"))
    x_arg = x if layout == "nchw" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    w_arg = w if layout == "nchw" else np.ascontiguousarray(w.transpose(0, 2, 3, 1))
    cfg = default_config(problem, shared_limit("sm_80"), split=False)
    got = emulate(problem, cfg, x_arg.view(np.uint16), w_arg.reshape(48, -1).view(np.uint16),
                  {"bias": bias.astype(np.float32)})
    got = got.astype(np.float16).astype(np.float32)
    if layout == "nhwc":
        got = got.transpose(0, 3, 1, 2)
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-2, atol=1e-2)


def test_conv_problems_the_plan_refuses():
    with pytest.raises(ValueError, match="C % 8"):
        conv(1, 3, 8, 16, 3, layout="nhwc")
    with pytest.raises(ValueError, match="not the GEMM"):
        GemmProblem(10, 16, 16, b_layout="nk", conv=conv(1, 16, 4, 16, 1))
    with pytest.raises(ValueError, match="multiples of 8"):  # K = 3 x 7 x 7: B's rows are not 16-byte multiples
        conv_problem(conv(1, 3, 32, 64, 7, stride=2, pad=3))


@needs_ptxas
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_ptxas_takes_a_resnet_conv_without_spills_on_tensor_cores(layout):
    """resnet50's 3x3 64-channel conv at batch 32 (M = 100352, K = 576) with bias, residual and Relu, sm_90."""
    c = conv(32, 64, 56, 64, 3, pad=1, layout=layout)
    problem = conv_problem(c, "float16", "float16", ("bias", "residual", "relu"))
    cfg = default_config(problem, shared_limit("sm_90"), 132, split=False)
    kernels = build_gemm(problem, cfg, get_target("cuda -arch=sm_90"))
    per_slice = cfg.mi * cfg.ni * cfg.block_k // 16
    ptx = kernels.ptx
    assert ptx.count("mma.sync.aligned.m16n8k16") == per_slice
    assert ptx.count("ldmatrix.sync.aligned") == (cfg.mi + cfg.ni // 2) * cfg.block_k // 16
    b_copies, a_copies = cfg.b_stage_chunks // cfg.threads, cfg.a_stage_chunks // cfg.threads
    copies = b_copies + (a_copies if layout == "nhwc" else 0)  # NCHW: A gathered by plain loads
    assert ptx.count("cp.async.cg.shared.global") == copies * cfg.stages  # the prologue's stages - 1, the body's one
    cubin, usage = assemble_with_usage(ptx, "sm_90")
    main = usage["kiln_gemm"]
    assert main["spill_stores"] == main["spill_loads"] == 0 and main["registers"] <= 255
    sass = sass_counts(cubin)[0]["kiln_gemm"]
    assert sass["HMMA"] == per_slice and sass["LDSM"] == (cfg.mi + cfg.ni // 2) * cfg.block_k // 16
    assert sass["LDGSTS"] == copies * cfg.stages


@needs_gpu
@pytest.mark.parametrize("case", LAYOUT_CASES, ids=case_id)
def test_the_conv_kernels_match_the_reference_on_the_gpu(case):
    c, dtype, out_dtype, epilogue, cfg = case
    problem = conv_problem(c, dtype, out_dtype, epilogue)
    x_arg, w_arg, x, w, extras = operands(c, dtype)
    kernels = build_gemm(problem, cfg, get_target("cuda"))

    def device(values, dtype_):
        if dtype_ == "float32":
            return values.astype(np.float32)
        bits = values if values.dtype == np.uint16 else half_bits(values, dtype_)
        return bits.view(np.float16) if dtype_ == "float16" else bits

    arrays = {"a": device(x_arg, dtype), "b": device(w_arg, dtype),
              **{k: device(v, out_dtype) for k, v in extras.items()},
              "c": device(np.zeros(c.output_shape, np.float32), out_dtype),
              "workspace": np.zeros((cfg.split_k, problem.m, problem.n), np.float32)}
    seen = {k: arrays[k] if out_dtype == "float32" else to_float32(arrays[k].view(np.uint16), out_dtype)
            for k in extras}
    lib = gemm_library(kernels)
    try:
        lib.call(tuple(kernels.launches), *[arrays[name] for name in kernels.params])
    finally:
        lib.close()
    got = arrays["c"] if out_dtype == "float32" else to_float32(arrays["c"].view(np.uint16), out_dtype)
    tol = 1e-3 if out_dtype == "float32" else 2e-2
    np.testing.assert_allclose(got, reference(problem, x, w, seen), rtol=tol, atol=tol)
