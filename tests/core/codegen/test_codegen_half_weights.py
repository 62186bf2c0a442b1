"""Half-size weights in the generated code, on explicit targets (not the host's vector width): float16 weights read as
vectors widen with F16C `vcvtph2ps` (AVX2 ymm, AVX-512 zmm) or AArch64 `fcvtl`; bfloat16 by a 16-bit shift; a kernel
that reads weights as broadcast scalars widens them once per call into a float32 workspace instead."""
from __future__ import annotations

import re

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from core.backends import get_backend
from core.codegen import assembly, optimized_llvm_ir
from core.driver.precision import store_weights
from core.frontend import import_onnx
from tests.backend_calls import optimize, build_executable
from core.lowering.narrow_reads import scalar_reads
from core.target import get_target

rng = np.random.default_rng(0)


def model(nodes, x_shape, y_shape, weight) -> bytes:
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                              [numpy_helper.from_array(weight, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


MATMUL = model([helper.make_node("MatMul", ["x", "w"], ["y"])], [8, 128], [8, 64],
               rng.standard_normal((128, 64)).astype(np.float32))
# Two output channels: too few for NCHW[x]c blocks, so the NCHW conv broadcasts each weight as a scalar.
NARROW_CONV = model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], [1, 64, 10, 10], [1, 2, 10, 10],
                    rng.standard_normal((2, 64, 3, 3)).astype(np.float32))


def kernels(data: bytes, target_name: str, precision: str):
    target = get_target(target_name)
    graph = optimize(import_onnx(data), 3, target)
    graph = store_weights(graph, precision, True, get_backend(target).weight_storage_dtypes(target), target)
    return build_executable(graph, target).funcs, target


def narrow_params(func):
    return [b for b in func.params if b.dtype in ("float16", "bfloat16")]


def test_float16_weight_vectors_widen_with_f16c_on_avx2_and_avx512():
    for name, register in (("x86-64-v3", "ymm"), ("x86-64-v4", "zmm")):
        funcs, target = kernels(MATMUL, name, "fp16")
        (func,) = [f for f in funcs if narrow_params(f)]
        assert not scalar_reads(func, narrow_params(func))  # widened inside the vector loads
        assert re.search(rf"vcvtph2ps\s+[^\n]*{register}", assembly([func], target)), name


def test_float16_weights_widen_with_fcvtl_on_aarch64():
    funcs, target = kernels(MATMUL, "aarch64", "fp16")
    (func,) = [f for f in funcs if narrow_params(f)]
    assert re.search(r"fcvtl2?\s+v\d+\.4s", assembly([func], target))


def test_bfloat16_weights_widen_by_a_shift():
    funcs, target = kernels(MATMUL, "x86-64-v3", "bf16")
    (func,) = [f for f in funcs if narrow_params(f)]
    text = optimized_llvm_ir([func], target)
    assert re.search(r"shl (nuw )?<\d+ x i32> %[\w.]+, (splat \(i32 16\)|<i32 16)", text)
    assert "vcvtph2ps" not in assembly([func], target)


def test_weights_read_as_scalars_widen_once_into_a_workspace():
    funcs, target = kernels(NARROW_CONV, "x86-64-v3", "fp16")
    (func,) = [f for f in funcs if narrow_params(f)]
    (weight,) = narrow_params(func)
    numel = int(np.prod(weight.shape))
    assert any(b.dtype == "float32" and int(np.prod(b.shape)) == numel for b in func.workspaces)
    assert not scalar_reads(func, [weight])  # only the (vectorized) widening reads the float16 buffer
    assert "vcvtph2ps" in assembly([func], target)
