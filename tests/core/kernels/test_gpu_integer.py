"""int8 MatMul on cuda with dp4a: MatMulInteger's constant weights are packed for dp4a (u8 or s8 data as it comes),
the schedule's loops give numpy's exact int32 sums at the saturation edges (run on this CPU without the
instruction), the PTX holds dp4a and ptxas accepts it, and on a GPU (skipped without one) it matches ONNX Runtime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from core.codegen.nvptx import emit_ptx
from core.codegen.ptxas import assemble, find_ptxas
from core.frontend import import_onnx
from core.graph.ir import TensorType
from core.graph.op_defs.integer import matmul_integer_reference
from tests.backend_calls import optimize, build_executable
from core.packing.int8 import column_correction, pack_dot_weights
from core.runtime.cuda_driver import gpu_available
from core.target import get_target
from tests.helpers.onnx_models import make_model

from .test_gpu_harness import lower_gpu, run_on_cpu

rng = np.random.default_rng(8)
LIMITS = {"uint8": (0, 255), "int8": (-128, 127)}
DP4A = {"uint8": "cuda_dp4a_u8s8_1x4", "int8": "cuda_dp4a_s8s8_1x4"}


def packed_matmul(name: str, a: np.ndarray, b: np.ndarray, zero: int, **knobs):
    """MatMulIntegerPacked for dp4a (data of the intrinsic's own type: no shift), lowered for cuda."""
    k, n = b.shape
    inputs = [a, pack_dot_weights(b, 1), column_correction(b, zero)]
    attrs = {"columns": n, "depth": k, "data_shift": 0, "intrinsic": DP4A[a.dtype.name]}
    return lower_gpu(name, "MatMulIntegerPacked", inputs, attrs, [TensorType(a.shape[:-1] + (n,), "int32")],
                     **knobs), inputs


def cases(dtype: str):
    lo, hi = LIMITS[dtype]
    edge = hi if dtype == "uint8" else lo
    return [
        ("random", rng.integers(lo, hi + 1, (40, 64)).astype(dtype), rng.integers(-128, 128, (64, 48)).astype(np.int8),
         (lo + hi) // 2),
        ("saturated", np.full((8, 2048), edge, dtype), np.full((2048, 32), -128, np.int8), lo),
        ("zero_point_high", rng.integers(lo, hi + 1, (9, 32)).astype(dtype), np.full((32, 16), 127, np.int8), hi),
        ("ragged_k_batched", rng.integers(lo, hi + 1, (2, 5, 30)).astype(dtype),
         rng.integers(-128, 128, (30, 8)).astype(np.int8), 0),
    ]


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_the_dp4a_loops_give_exact_int32_sums(dtype):
    funcs, feeds, wants = [], [], []
    for cid, a, b, zero in cases(dtype):
        func, inputs = packed_matmul(f"i8_{cid}", a, b, zero, dp4a=0)
        funcs.append(func)
        feeds.append(inputs)
        wants.append(matmul_integer_reference([a, b, np.array(zero, dtype)], {})[0])
    for (got,), want, (cid, *_) in zip(run_on_cpu(funcs, feeds), wants, cases(dtype)):
        np.testing.assert_array_equal(got, want, err_msg=f"{dtype} {cid}")


def matmul_integer_model(m: int, k: int, n: int, dtype=np.uint8) -> onnx.ModelProto:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inits = [numpy_helper.from_array(rng.integers(-128, 128, (k, n)).astype(np.int8), "w"),
             numpy_helper.from_array(np.array(128 if dtype == np.uint8 else -3, dtype), "x_zero"),
             numpy_helper.from_array(np.array(0, np.int8), "w_zero")]
    node = helper.make_node("MatMulInteger", ["x", "w", "x_zero", "w_zero"], ["y"])
    graph = helper.make_graph([node], "mmi", [helper.make_tensor_value_info("x", elem, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [m, n])], inits)
    return make_model(graph)


def cuda_kernels(model: onnx.ModelProto, arch: str = "sm_80"):
    target = get_target(f"cuda -arch={arch}")
    graph = optimize(import_onnx(model.SerializeToString()), 3, target)
    return graph, build_executable(graph, target).funcs


@pytest.mark.parametrize("dtype,instruction", [(np.uint8, "dp4a.u32.s32"), (np.int8, "dp4a.s32.s32")])
def test_matmul_integer_packs_for_dp4a_and_its_ptx_holds_it(dtype, instruction):
    graph, funcs = cuda_kernels(matmul_integer_model(32, 100, 48, dtype))
    (node,) = graph.nodes
    assert node.op == "MatMulIntegerPacked" and node.attr("intrinsic") == DP4A[np.dtype(dtype).name]
    assert node.attr("data_shift") == 0  # dp4a takes the data's own 8-bit type
    for arch in ("sm_80", "sm_90"):
        ptx, _ = emit_ptx(list(funcs), get_target(f"cuda -arch={arch}"))
        assert instruction in ptx
        if find_ptxas() is not None:
            assert len(assemble(ptx, arch)) > 0


@pytest.mark.skipif(not gpu_available(), reason="no NVIDIA GPU and driver")
def test_dp4a_matmul_matches_onnxruntime_on_the_gpu(tmp_path):
    import core
    from core.driver.reference import reference_outputs  # exact for integer ops; lowers the IR version ORT reads
    from core.runtime import load

    model = matmul_integer_model(64, 256, 96)
    artifact = core.compile(model.SerializeToString(), target="cuda")
    artifact.save(tmp_path / "model.tar.gz")
    x = rng.integers(0, 256, (64, 256)).astype(np.uint8)
    want = reference_outputs(model, {"x": x})["y"]
    with load(tmp_path / "model.tar.gz") as module:
        np.testing.assert_array_equal(module.run({"x": x})["y"], want)


def packed_conv(name: str, x: np.ndarray, w: np.ndarray, zero: int, strides, pads, **knobs):
    from tests.helpers.kernel_runs import onnx_reference
    from core.packing.int8 import conv_weights_as_columns

    columns = conv_weights_as_columns(w)
    o, _, kh, kw = w.shape
    inputs = [x, pack_dot_weights(columns, 1), column_correction(columns, zero)]
    attrs = {"kernel": (kh, kw), "strides": strides, "pads": pads, "dilations": (1, 1), "columns": o,
             "data_zero_point": zero, "data_shift": 0, "intrinsic": DP4A[x.dtype.name]}
    want = onnx_reference("ConvInteger", [x, w, np.array(zero, x.dtype)],
                          {"strides": list(strides), "pads": list(pads)})
    out = [TensorType(want[0].shape, "int32")]
    return lower_gpu(name, "ConvIntegerPacked", inputs, attrs, out, **knobs), inputs, want[0]


CONVS = [  # (x shape, output channels, kernel, strides, pads)
    ((1, 16, 10, 10), 32, 3, (1, 1), (1, 1, 1, 1)),
    ((1, 3, 15, 15), 24, 3, (2, 2), (1, 1, 1, 1)),  # 3 channels: one group of 4, padded
    ((2, 64, 7, 7), 64, 1, (1, 1), (0, 0, 0, 0)),
    ((1, 20, 9, 9), 8, 3, (1, 1), (0, 1, 1, 0)),  # 5 channel groups: a partial step of 8
]


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_the_dp4a_conv_loops_match_onnxruntime(dtype):
    lo, hi = LIMITS[dtype]
    funcs, feeds, wants = [], [], []
    for k, (shape, o, kernel, strides, pads) in enumerate(CONVS):
        x = rng.integers(lo, hi + 1, shape).astype(dtype)
        w = rng.integers(-128, 128, (o, shape[1], kernel, kernel)).astype(np.int8)
        func, inputs, want = packed_conv(f"c8_{k}", x, w, hi if k == 3 else (lo + hi) // 2, strides, pads, dp4a=0)
        funcs.append(func)
        feeds.append(inputs)
        wants.append(want)
    for (got,), want, func in zip(run_on_cpu(funcs, feeds), wants, funcs):
        np.testing.assert_array_equal(got, want, err_msg=func.name)


def test_conv_integer_packs_for_dp4a_and_its_ptx_holds_it():
    inits = [numpy_helper.from_array(rng.integers(-128, 128, (32, 16, 3, 3)).astype(np.int8), "w"),
             numpy_helper.from_array(np.array(128, np.uint8), "x_zero"),
             numpy_helper.from_array(np.array(0, np.int8), "w_zero")]
    node = helper.make_node("ConvInteger", ["x", "w", "x_zero", "w_zero"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph([node], "ci", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 16, 14, 14])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 32, 14, 14])], inits)
    graph, funcs = cuda_kernels(make_model(graph))
    assert [n.op for n in graph.nodes] == ["ConvIntegerPacked"]
    for arch in ("sm_80", "sm_90"):
        ptx, _ = emit_ptx(list(funcs), get_target(f"cuda -arch={arch}"))
        assert "dp4a.u32.s32" in ptx
        if find_ptxas() is not None:
            assert len(assemble(ptx, arch)) > 0


def test_tuning_explores_dp4a_tiles():
    """The packed ops' cuda templates: the default is a point of each space, and valid configs tensorize to dp4a and
    (the same loops without it, run here) compute the exact sums."""
    import random

    from tests.backend_calls import extract_tasks

    target = get_target("cuda")
    graph = optimize(import_onnx(matmul_integer_model(48, 96, 64).SerializeToString()), 3, target)
    (task,) = extract_tasks(graph, target)
    assert task.template.op == "MatMulIntegerPacked" and task.valid(task.space.default)
    valid = [c for c in (task.space.get(i) for i in range(len(task.space))) if task.valid(c)]
    a = rng.integers(0, 256, (48, 96)).astype(np.uint8)
    b = rng.integers(-128, 128, (96, 64)).astype(np.int8)
    want = matmul_integer_reference([a, b, np.array(128, np.uint8)], {})[0]
    for config in random.Random(5).sample(valid, 3):
        assert "dp4a.u32.s32" in emit_ptx([task.instantiate(config, f"c{config.index}")], target)[0]
        knobs = {k: int(v) for k, v in config.values.items()}
        func, inputs = packed_matmul(f"t{config.index}", a, b, 128, dp4a=0, **knobs)
        (got,) = run_on_cpu([func], [inputs])[0]
        np.testing.assert_array_equal(got, want, err_msg=str(knobs))
