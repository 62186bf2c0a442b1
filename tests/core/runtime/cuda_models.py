"""A small hand-scheduled CUDA model for the host-side tests (no graph schedules needed): an elementwise
kernel into the arena, a shared-memory tiled matmul into output 0, and a bias+ReLU that reads output 0
back into output 1 (staged outputs read by later kernels)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from core.codegen import BufferRef, KernelCall, ModelPlan
from tests.backend_calls import build_library, target_metadata
from core.runtime.header import render_header
from core.runtime.package import write_artifact
from core.target import get_target
from core.te import tensor as te
from core.te.lower import lower
from core.te.schedule import create_schedule
from tests.helpers.gpu_prim_funcs import tiled_matmul as cooperative_matmul
from core.tir.expr import maximum
from tests.helpers.onnx_models import make_model

M, K, N = 64, 128, 96


def _bind_flat(s, t, threads: int = 128) -> None:
    bx, tx = s[t].split(s[t].fuse(*s[t].op.axis), threads)
    s[t].bind(bx, "blockIdx.x")
    s[t].bind(tx, "threadIdx.x")


def scale_shift():
    x = te.placeholder((M, K), "float32", "x")
    t = te.compute((M, K), lambda i, j: x[i, j] * 2.0 + 1.0, "t")
    s = create_schedule(t)
    _bind_flat(s, t, 256)
    return lower(s, [x, t], "scale_shift")


def tiled_matmul(tile: int = 16):
    return cooperative_matmul(M, N, K, tile, tile, name="matmul")


def bias_relu():
    y = te.placeholder((M, N), "float32", "y")
    b = te.placeholder((N,), "float32", "b")
    z = te.compute((M, N), lambda i, j: maximum(y[i, j] + b[j], 0.0), "z")
    s = create_schedule(z)
    _bind_flat(s, z, 128)
    return lower(s, [y, b, z], "bias_relu")


def kernels():
    return [scale_shift(), tiled_matmul(), bias_relu()]


def plan() -> ModelPlan:
    w_bytes, b_bytes, t_bytes = K * N * 4, N * 4, M * K * 4
    calls = (KernelCall("scale_shift", (BufferRef("input", 0), BufferRef("arena", 0, 0))),
             KernelCall("matmul", (BufferRef("arena", 0, 0), BufferRef("weight", 0, 0), BufferRef("output", 0))),
             KernelCall("bias_relu", (BufferRef("output", 0), BufferRef("weight", 0, w_bytes), BufferRef("output", 1))))
    return ModelPlan(calls, num_inputs=1, num_outputs=2, arena_bytes=t_bytes, weights_bytes=w_bytes + b_bytes)


def weights(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((K, N)).astype("float32"), rng.standard_normal(N).astype("float32")


def reference(x: np.ndarray, W: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
    y = (x * 2 + 1) @ W
    return {"y": y, "z": np.maximum(y + b, 0)}


def metadata(target: str = "cuda") -> dict:
    tgt = get_target(target)
    meta = {"inputs": [{"name": "x", "shape": [M, K], "dtype": "float32"}],
            "outputs": [{"name": "y", "shape": [M, N], "dtype": "float32"},
                        {"name": "z", "shape": [M, N], "dtype": "float32"}],
            "compiler_version": "test", "model_sha256": "0" * 64}
    meta.update(target_metadata(tgt))
    return meta


def build_artifact(folder: Path, target: str = "cuda") -> Path:
    """The model's artifact (.tar.gz) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    lib = build_library(kernels(), get_target(target), folder / "libkiln_model.so", plan=plan())
    W, b = weights()
    meta = metadata(target)
    return write_artifact(folder / "hand_cuda.tar.gz", library=lib, weights=W.tobytes() + b.tobytes(), metadata=meta,
                          header=render_header(meta), report={"schema": 1})


def mlp_onnx() -> bytes:
    """A small ONNX model for whole-pipeline cuda compiles: MatMul, Add, then Relu and Sigmoid outputs."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "bias")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "bias"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"]), helper.make_node("Sigmoid", ["a"], ["s"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 32]),
                               helper.make_tensor_value_info("s", TensorProto.FLOAT, [8, 32])], [w, bias])
    return make_model(graph).SerializeToString()
