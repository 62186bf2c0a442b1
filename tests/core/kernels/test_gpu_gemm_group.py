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
from core.graph.passes.manager import optimize
from core.kernels.schedules.gpu.gemm_group import gemm_of
from core.kernels.schedules.gpu.gemm_mma_emulate import emulate, to_float32
from core.lowering.executable import build_executable, group_inputs
from core.target import get_target

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
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


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
    _, cfg, _ = gemm_of(func)
    assert launches[func.name].block == (cfg.threads, 1, 1) and launches[func.name].grid == (2, 2, 1)
    for instruction in ("ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ldmatrix.sync.aligned.m8n8.x4.trans",
                        "cp.async.cg.shared.global", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"):
        assert instruction in ptx
    _, usage = assemble_with_usage(ptx, arch)
    assert usage[func.name]["spill_stores"] == 0 and usage[func.name]["shared_bytes"] == cfg.shared_bytes


def test_groups_the_gemm_does_not_take_keep_their_loops():
    """sm_75 has no cp.async; a batched B, or a graph that is not a chain (Gelu's erf form), stays scheduled."""
    assert not any(gemm_of(f) for f in compiled(dense_model(1, 64, 64, 64, ("bias",)), "sm_75")[1].funcs)
    gelu = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Gelu", ["t"], ["y"])], "g",
        [helper.make_tensor_value_info("x", F16, [64, 64])], [helper.make_tensor_value_info("y", F16, [64, 64])],
        [numpy_helper.from_array(np.ones((64, 64), np.float16), "w")]), opset_imports=[helper.make_opsetid("", 20)])
    assert not any(gemm_of(f) for f in compiled(gelu)[1].funcs)
