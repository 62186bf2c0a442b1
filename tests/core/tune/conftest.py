"""Tiny models and tasks for the tuning tests (small workloads: each candidate builds in ~0.1 s)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper


def tiny_cnn(two_identical: bool = True) -> bytes:
    """Conv+Relu, (optionally twice the same conv), Reshape, MatMul: two or three kernels to tune."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2, "w1"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2, "w2"),
             numpy_helper.from_array(rng.standard_normal((8 * 16 * 16, 16)).astype(np.float32) * 0.02, "w3"),
             numpy_helper.from_array(np.array([1, -1], np.int64), "shape")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"])]
    last = "r1"
    if two_identical:
        nodes += [helper.make_node("Conv", ["r1", "w2", "b1"], ["c2"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", ["c2"], ["r2"])]
        last = "r2"
    nodes += [helper.make_node("Reshape", [last, "shape"], ["f"]), helper.make_node("MatMul", ["f", "w3"], ["y"])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


@pytest.fixture(scope="session")
def make_tiny_cnn():
    return tiny_cnn


@pytest.fixture(scope="session")
def tiny_model() -> bytes:
    return tiny_cnn()


@pytest.fixture(scope="session")
def tiny_graph(tiny_model):
    from core.frontend import import_onnx
    from tests.backend_calls import optimize

    return optimize(import_onnx(tiny_model), 3)


@pytest.fixture(scope="session")
def tiny_tasks(tiny_graph):
    from core.target import get_target
    from tests.backend_calls import extract_tasks

    return extract_tasks(tiny_graph, get_target("native"))


@pytest.fixture(scope="session")
def conv_task(tiny_tasks):
    return next(t for t in tiny_tasks if t.template.op == "Conv2dNCHWc")
