"""A compiled ONNX model on Kiln's thread pool: matches ONNX Runtime and gives the same bits with 1, 2
and 3 threads, run after run (the pool's static chunks do not depend on which thread runs them)."""
from __future__ import annotations

import ctypes
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import core
from core.driver.validate import onnxruntime_session

RNG = np.random.default_rng(11)


def conv_net() -> onnx.ModelProto:
    """Conv 3x3 -> Relu -> Conv 1x1 -> Add (residual) -> GlobalAveragePool -> Flatten -> Gemm: every kernel
    big enough to take the parallel path."""
    w1 = numpy_helper.from_array(RNG.standard_normal((16, 8, 3, 3)).astype("float32") * 0.2, "w1")
    b1 = numpy_helper.from_array(RNG.standard_normal(16).astype("float32"), "b1")
    w2 = numpy_helper.from_array(RNG.standard_normal((16, 16, 1, 1)).astype("float32") * 0.2, "w2")
    fc = numpy_helper.from_array(RNG.standard_normal((16, 10)).astype("float32"), "fc")
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]),
             helper.make_node("Add", ["c2", "r1"], ["s"]),
             helper.make_node("GlobalAveragePool", ["s"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fc"], ["y"])]
    graph = helper.make_graph(nodes, "conv_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 40, 40])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], [w1, b1, w2, fc])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    model = conv_net()
    artifact = core.compile(model, target="native", validate=True, benchmark=False, threads=2)
    path = artifact.save(tmp_path_factory.mktemp("convnet") / "convnet.tar.gz")
    return model, artifact.report, path


def test_model_matches_onnxruntime_with_1_2_3_threads(compiled):
    model, report, path = compiled
    assert report["validation"]["max_abs_err"] < 1e-3
    x = RNG.standard_normal((1, 8, 40, 40)).astype("float32")
    session = onnxruntime_session(model.SerializeToString(), 2)
    ref = session.run(["y"], {"x": x})[0]
    outputs = {}
    with core.runtime.load(path) as m:
        for threads in (1, 2, 3, 2, 1):
            m.set_num_threads(threads)
            assert m.num_threads == threads
            for _ in range(3):
                y = m.run({"x": x})["y"]
                np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
                outputs.setdefault(threads, y)
                assert y.tobytes() == outputs[threads].tobytes(), f"{threads} threads: not deterministic"
        # The kernels really run on the pool's workers too. Each run takes about 0.1 ms, and a worker
        # starved of CPU by other processes loses its chunks to the caller, so allow many runs.
        chunks = m._lib.kiln_pool_worker_chunks
        chunks.restype = ctypes.c_int64
        m.set_num_threads(2)
        deadline = time.monotonic() + 20
        while chunks() == 0 and time.monotonic() < deadline:
            m.run({"x": x})
        assert chunks() > 0
    assert outputs[1].tobytes() == outputs[2].tobytes() == outputs[3].tobytes()
