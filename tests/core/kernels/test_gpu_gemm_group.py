"""Fused float16 MatMul groups compiled for cuda become the tensor-core GEMM (gemm_group.py): the kernel a model
compiles to, run by the CPU emulation of its threads on the model's own weights, matches ONNX Runtime; its PTX
has ldmatrix, cp.async and mma.sync and ptxas takes it; groups it cannot take keep their scheduled loops."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from core.codegen.nvptx import emit_ptx
from core.codegen.ptxas import assemble_with_usage, find_ptxas
from core.frontend import import_onnx
from tests.backend_calls import optimize, build_executable
from core.kernels.gemm_plan.kernel_attr import gemm_of
from core.backends.cuda.schedules.gemm_mma_emulate import emulate, to_float32
from core.lowering.executable import group_inputs
from core.runtime.cuda_driver import gpu_available
from core.target import get_target
from tests.helpers.onnx_models import make_model

rng = np.random.default_rng(3)
F16 = onnx.TensorProto.FLOAT16


def dense_model(batch: int, m: int, k: int, n: int, tail: tuple[str, ...]) -> onnx.ModelProto:
    """x[batch, m, k] @ W[k, n] then `tail`: "bias" (+ bias[n]), "residual" (+ input r), an activation op,
    "float32" (a Cast of the float16 result: what BERT's layers end with before their float32 LayerNorm)."""
    w = numpy_helper.from_array((rng.standard_normal((k, n)) * 0.1).astype(np.float16), "w")
    bias = numpy_helper.from_array((rng.standard_normal(n) * 0.1).astype(np.float16), "bias")
    inputs = [helper.make_tensor_value_info("x", F16, [batch, m, k])]
    nodes, current = [helper.make_node("MatMul", ["x", "w"], ["t0"])], "t0"
    for step, what in enumerate(tail, 1):
        if what == "bias":
            nodes.append(helper.make_node("Add", [current, "bias"], [f"t{step}"]))
        elif what == "residual":
            inputs.append(helper.make_tensor_value_info("r", F16, [batch, m, n]))
            nodes.append(helper.make_node("Add", ["r", current], [f"t{step}"]))
        elif what == "float32":
            nodes.append(helper.make_node("Cast", [current], [f"t{step}"], to=onnx.TensorProto.FLOAT))
        else:
            nodes.append(helper.make_node(what, [current], [f"t{step}"]))
        current = f"t{step}"
    nodes.append(helper.make_node("Identity", [current], ["y"]))
    out = onnx.TensorProto.FLOAT if tail[-1:] == ("float32",) else F16
    graph = helper.make_graph(nodes, "dense", inputs, [helper.make_tensor_value_info("y", out, [batch, m, n])],
                              [w, bias])
    return make_model(graph)


def compiled(model: onnx.ModelProto, arch: str = "sm_80"):
    target = get_target(f"cuda -arch={arch}")
    graph = optimize(import_onnx(model.SerializeToString()), 3, target)
    return graph, build_executable(graph, target), target


@pytest.mark.parametrize("tail", [("bias", "Relu"), ("bias", "residual", "Relu"), ("Sigmoid",),
                                  ("bias", "residual", "float32")])
def test_the_compiled_gemm_kernel_emulated_matches_onnxruntime(tail):
    model = dense_model(2, 96, 200, 136, tail)
    graph, exe, _ = compiled(model)
    (func,) = [f for f in exe.funcs if gemm_of(f) is not None]
    problem, cfg, where = gemm_of(func)
    assert (problem.m, problem.n, problem.k) == (192, 136, 200) and problem.extras_dtype == "float16"
    assert problem.out_dtype == ("float32" if "float32" in tail else "float16")
    (fused,) = [n for n in graph.nodes if n.op == "Fused"]
    values = group_inputs(list(fused.attr("body").nodes))
    feeds = {"x": (rng.standard_normal((2, 96, 200)) * 0.5).astype(np.float16)}
    if "residual" in tail:
        feeds["r"] = rng.standard_normal((2, 96, 136)).astype(np.float16)
    arrays = [np.asarray(graph.constants[v]) if v in graph.constants else feeds[v] for v in values]
    role = {r: arrays[i] for r, i in where.items() if r != "c"}
    extras = {r: role[r].astype(np.float32).reshape(-1, 136).squeeze(0) if r == "bias" else
              role[r].astype(np.float32).reshape(-1, 136) for r in ("bias", "residual") if r in role}
    got = emulate(problem, cfg, role["a"].reshape(-1, 200).view(np.uint16), role["b"].view(np.uint16), extras)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got16 = got.astype(np.float16).astype(np.float32).reshape(want.shape)
    np.testing.assert_allclose(got16, want.astype(np.float32), rtol=1e-2, atol=1e-2)


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed (pip install nvidia-cuda-nvcc-cu12)")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_model_ptx_runs_the_gemm_on_tensor_cores(arch):
    _, exe, target = compiled(dense_model(1, 256, 512, 256, ("bias", "Relu")), arch)
    ptx, launches = emit_ptx(list(exe.funcs), target)
    (func,) = exe.funcs
    problem, cfg, _ = gemm_of(func)
    assert (cfg.block_m, cfg.block_n) == (64, 64)  # 4 tiles of 128 x 128 would leave the GPU idle: 16 of 64 x 64
    assert launches[func.name].block == (cfg.threads, 1, 1)
    # 16 tiles leave most SMs idle over 16 k slices: split in 2 (blockIdx.z), the parts summed by the reduce kernel.
    assert cfg.split_k == 2 and launches[func.name].grid == (4, 4, 2) and f"{func.name}_reduce" in launches
    for instruction in ("ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ldmatrix.sync.aligned.m8n8.x4.trans",
                        "cp.async.cg.shared.global", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"):
        assert instruction in ptx
    _, usage = assemble_with_usage(ptx, arch)
    assert usage[func.name]["spill_stores"] == 0 and usage[func.name]["shared_bytes"] == cfg.shared_bytes


def test_groups_the_gemm_does_not_take_keep_their_loops():
    """sm_75 has no cp.async; a batched B, or a graph that is not a chain (Gelu's erf form), stays scheduled."""
    assert not any(gemm_of(f) for f in compiled(dense_model(1, 64, 64, 64, ("bias",)), "sm_75")[1].funcs)
    gelu = make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Gelu", ["t"], ["y"])], "g",
        [helper.make_tensor_value_info("x", F16, [64, 64])], [helper.make_tensor_value_info("y", F16, [64, 64])],
        [numpy_helper.from_array(np.ones((64, 64), np.float16), "w")]), opset=20)
    assert not any(gemm_of(f) for f in compiled(gelu)[1].funcs)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_a_half_precision_compile_of_a_float32_model_runs_its_gemm_in_half(precision):
    """`--precision fp16|bf16` on cuda: the weight stored narrow is the GEMM's B as it is, the float32 activations
    are rounded to it as they are copied, sums stay float32; the emulated kernel matches ONNX Runtime's float32
    result at that format's tolerance."""
    from core.backends import get_backend
    from core.driver.precision import store_weights

    f32 = onnx.TensorProto.FLOAT
    w = numpy_helper.from_array((rng.standard_normal((256, 96)) * 0.1).astype(np.float32), "w")
    bias = numpy_helper.from_array((rng.standard_normal(96) * 0.1).astype(np.float32), "bias")
    model = make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "bias"], ["u"]),
         helper.make_node("Relu", ["u"], ["y"])], "dense", [helper.make_tensor_value_info("x", f32, [80, 256])],
        [helper.make_tensor_value_info("y", f32, [80, 96])], [w, bias]))
    target = get_target("cuda -arch=sm_80")
    graph = optimize(import_onnx(model.SerializeToString()), 3, target)
    graph = store_weights(graph, precision, True, get_backend(target).weight_storage_dtypes(target), target)
    (func,) = [f for f in build_executable(graph, target).funcs if gemm_of(f) is not None]
    problem, cfg, where = gemm_of(func)
    half = {"fp16": "float16", "bf16": "bfloat16"}[precision]
    assert (problem.dtype, problem.a_stored, problem.out_dtype, problem.epilogue) == (half, "float32", "float32",
                                                                                       ("bias", "relu"))
    (fused,) = [n for n in graph.nodes if n.op == "Fused"]
    values = group_inputs(list(fused.attr("body").nodes))
    x = rng.standard_normal((80, 256)).astype(np.float32)
    arrays = [np.asarray(graph.constants[v]) if v in graph.constants else x for v in values]
    weights = arrays[where["b"]]
    assert weights.dtype.itemsize == 2  # stored narrow: the kernel's B as it is
    got = emulate(problem, cfg, arrays[where["a"]], weights.view(np.uint16),
                  {"bias": arrays[where["bias"]].astype(np.float32)})
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    tolerance = 1e-2 if precision == "fp16" else 3e-2
    np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)
    ptx, _ = emit_ptx([func], target)
    assert "cvt.rn.f16x2.f32" in ptx or precision == "bf16"
    if find_ptxas() is not None:
        assert assemble_with_usage(ptx, "sm_80")[1][func.name]["spill_stores"] == 0


@pytest.mark.skipif(not gpu_available(), reason="no NVIDIA GPU and driver")
@pytest.mark.parametrize("precision", [None, "fp16"])
def test_models_through_the_gemm_match_onnxruntime_on_the_gpu(tmp_path, precision):
    """A float16 model (precision None) and a float32 one compiled at fp16, validated by compile() itself and
    checked here against ONNX Runtime."""
    import core
    from core.runtime import load

    if precision is None:
        model, x = dense_model(2, 96, 200, 136, ("bias", "Relu")), rng.standard_normal((2, 96, 200)).astype(np.float16)
    else:
        f32 = onnx.TensorProto.FLOAT
        w = numpy_helper.from_array((rng.standard_normal((200, 136)) * 0.1).astype(np.float32), "w")
        model = make_model(helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Relu", ["t"], ["y"])], "d",
            [helper.make_tensor_value_info("x", f32, [192, 200])], [helper.make_tensor_value_info("y", f32, [192, 136])],
            [w]))
        x = rng.standard_normal((192, 200)).astype(np.float32)
    artifact = core.compile(model.SerializeToString(), target="cuda", precision=precision)
    artifact.save(tmp_path / "m.tar.gz")
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with load(tmp_path / "m.tar.gz") as module:
        got = module.run({"x": x})["y"]
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-2, atol=2e-2)


def test_a_residual_gemm_keeps_its_parameters_through_the_whole_build():
    """The residual Add is elementwise over the output's shape, so the executor would read it from the output
    buffer (one fewer parameter); a GEMM kernel's parameters are its roles' and stay."""
    graph, exe, target = compiled(dense_model(1, 64, 64, 64, ("bias", "residual", "Relu")))
    (func,) = [f for f in exe.funcs if gemm_of(f) is not None]
    _, _, where = gemm_of(func)
    assert len(func.params) == 5 and sorted(where.values()) == list(range(5))
    emit_ptx(list(exe.funcs), target)
