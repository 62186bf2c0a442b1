"""float16 MatMuls on cuda tensor cores: the graph keeps float16 operands (half_matmul_operands), the schedule's loops
compute numpy's product (run on this CPU without the intrinsic), its PTX holds mma.sync for float16 and not for
float32 and ptxas accepts it (sm_80, sm_90), and on a GPU (skipped without one) it matches numpy and ONNX Runtime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from core.codegen.nvptx import emit_ptx
from core.codegen.ptxas import assemble, find_ptxas
from core.frontend import import_onnx
from core.graph.ir import TensorType
from tests.backend_calls import optimize, build_executable
from core.runtime.cuda_driver import gpu_available
from core.target import get_target
from tests.helpers.onnx_models import make_model

from .test_gpu_harness import lower_gpu, run_on_cpu

rng = np.random.default_rng(21)
needs_gpu = pytest.mark.skipif(not gpu_available(), reason="no NVIDIA GPU and driver")


def matmul_model(m: int, k: int, n: int, dtype=np.float16, batch=()) -> onnx.ModelProto:
    """x[*batch, m, k] @ W[*batch, k, n] + bias, Relu: the epilogue a dense layer fuses."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    w = numpy_helper.from_array((rng.standard_normal(batch + (k, n)) * 0.1).astype(dtype), "w")
    bias = numpy_helper.from_array((rng.standard_normal(n) * 0.1).astype(dtype), "bias")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "bias"], ["z"]),
             helper.make_node("Relu", ["z"], ["y"])]
    graph = helper.make_graph(nodes, "dense", [helper.make_tensor_value_info("x", elem, [*batch, m, k])],
                              [helper.make_tensor_value_info("y", elem, [*batch, m, n])], [w, bias])
    return make_model(graph)


def cuda_kernels(model: onnx.ModelProto, arch: str = "sm_80"):
    target = get_target(f"cuda -arch={arch}")
    graph = optimize(import_onnx(model.SerializeToString()), 3, target)
    return graph, build_executable(graph, target).funcs


def half_operands(m, k, n, batch=()):
    a = (rng.standard_normal(batch + (m, k)) * 0.5).astype(np.float16)
    b = (rng.standard_normal((k, n)) * 0.5).astype(np.float16)
    return a, b, np.matmul(a.astype(np.float32), b.astype(np.float32))


def lower_half_matmul(name, a, b, want, **knobs):
    return lower_gpu(name, "MatMul", [a, b], {"accumulate": "float32"}, [TensorType(want.shape, "float32")], **knobs)


def test_float16_matmuls_keep_float16_operands_and_accumulate_in_float32():
    graph, _ = cuda_kernels(matmul_model(64, 128, 64))
    (fused,) = graph.nodes
    matmul = next(n for n in fused.attr("body").nodes if n.op == "MatMul")
    assert matmul.attr("accumulate") == "float32"
    assert [fused.attr("body").type_of(v).dtype for v in matmul.inputs] == ["float16", "float16"]
    graph32, _ = cuda_kernels(matmul_model(64, 128, 64, np.float32))
    assert all(n.attr("accumulate") is None for f in graph32.nodes for n in (f.attr("body") or graph32).nodes)


@pytest.mark.parametrize("shape,knobs", [
    ((64, 128, 64), {}),
    ((32, 48, 24), {"warps": 1, "mma_m": 2, "k_tile": 16}),
    ((2, 32, 64, 16), {"warps": 2, "mma_m": 1, "k_tile": 32}),  # batched: blockIdx.z
])
def test_the_tensor_core_loops_compute_the_product(shape, knobs):
    """The schedule's loops without the intrinsic (each thread its fragment's outputs), run on this CPU."""
    *batch, m, k, n = shape
    a, b, want = half_operands(m, k, n, tuple(batch))
    func = lower_half_matmul("tc", a, b, want, tensor_cores=0, **knobs)
    (got,) = run_on_cpu([func], [[a, b]])[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed (pip install nvidia-cuda-nvcc-cu12)")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_float16_ptx_holds_mma_sync_and_ptxas_accepts_it(arch):
    _, funcs = cuda_kernels(matmul_model(64, 128, 64), arch)
    ptx, _ = emit_ptx(list(funcs), get_target(f"cuda -arch={arch}"))
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
    assert len(assemble(ptx, arch)) > 0
    _, funcs32 = cuda_kernels(matmul_model(64, 128, 64, np.float32), arch)
    assert "mma.sync" not in emit_ptx(list(funcs32), get_target(f"cuda -arch={arch}"))[0]


def test_without_tensor_cores_or_whole_tiles_the_simt_schedule_runs():
    """sm_75 has no m16n8k16 f16 -> f32 in this form, and 17 rows cannot be split into 16-row mma tiles."""
    _, funcs = cuda_kernels(matmul_model(64, 128, 64), "sm_75")
    assert "mma.sync" not in emit_ptx(list(funcs), get_target("cuda -arch=sm_75"))[0]
    a, b, want = half_operands(17, 32, 16)
    func = lower_half_matmul("simt", a, b, want)
    (got,) = run_on_cpu([func], [[a, b]])[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@needs_gpu
def test_mma_kernels_match_numpy_on_the_gpu():
    from core.codegen.cuda_kernels import load_cuda_kernels

    cases = [((64, 128, 64), {}), ((32, 48, 24), {"warps": 1, "mma_m": 2, "k_tile": 16}),
             ((128, 256, 96), {"warps": 4, "mma_m": 4, "k_tile": 32})]
    funcs, feeds = [], []
    for k_, ((m, k, n), knobs) in enumerate(cases):
        a, b, want = half_operands(m, k, n)
        funcs.append(lower_half_matmul(f"mma{k_}", a, b, want, **knobs))
        feeds.append((a, b, want))
    lib = load_cuda_kernels(funcs, get_target("cuda"))
    for func, (a, b, want) in zip(funcs, feeds):
        got = np.zeros(want.shape, np.float32)
        lib.call(func.name, a, b, got)
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3, err_msg=func.name)
    lib.close()


@needs_gpu
def test_a_float16_model_on_tensor_cores_matches_onnxruntime(tmp_path):
    import core
    from core.driver.reference import reference_outputs  # exact for integer ops; lowers the IR version ORT reads
    from core.runtime import load

    model = matmul_model(128, 256, 64)
    artifact = core.compile(model.SerializeToString(), target="cuda")
    artifact.save(tmp_path / "model.tar.gz")
    x = rng.standard_normal((128, 256)).astype(np.float16)
    want = reference_outputs(model, {"x": x})["y"]
    with load(tmp_path / "model.tar.gz") as module:
        got = module.run({"x": x})["y"]
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2)


def test_tuning_explores_tensor_core_tiles():
    """A batched float16 MatMul's task (one the whole-group GEMM of gemm_group.py does not take: its B is 3-D) has
    the tensor-core knobs; its valid configs tensorize and ptxas takes them. A 2-D one has no task: the GEMM
    kernel builds its group whole."""
    from tests.backend_calls import extract_tasks

    target = get_target("cuda")
    graph = optimize(import_onnx(matmul_model(64, 128, 64).SerializeToString()), 3, target)
    assert not [t for t in extract_tasks(graph, target) if t.template.op == "MatMul"]
    graph = optimize(import_onnx(matmul_model(64, 128, 64, batch=(2,)).SerializeToString()), 3, target)
    (task,) = [t for t in extract_tasks(graph, target) if t.template.op == "MatMul"]
    assert {"warps", "mma_m", "k_tile"} <= set(task.space.default.values) and task.valid(task.space.default)
    valid = [c for c in (task.space.get(i) for i in range(len(task.space))) if task.valid(c)]
    assert len(valid) > 4
    for config in valid[:: max(1, len(valid) // 3)]:
        ptx, _ = emit_ptx([task.instantiate(config, f"c{config.index}")], target)
        assert "mma.sync" in ptx, config.values
        if find_ptxas() is not None:
            assert len(assemble(ptx, "sm_80")) > 0
