"""Tuning for the cuda target: a model's conv and matmul kernels become tasks with GPU templates;
random configs of their spaces compute what the default schedule does (run in CPU emulation),
the Builder turns candidates into PTX bundles ptxas accepts, and on a GPU the tuner measures them."""
from __future__ import annotations

import json
import random

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.backend_calls import build_library, optimize, extract_tasks, tunable_ops
from core.codegen.kernel_library import load_kernels
from core.codegen.ptxas import assemble, find_ptxas
from core.frontend import import_onnx
from core.runtime.cuda_driver import gpu_available
from core.target import get_target
from core.tune.measure import LocalBuilder, Measurer
from tests.helpers.onnx_models import make_model

CUDA = get_target("cuda")


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    init = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n) for n, s in
            [("w1", (16, 8, 3, 3)), ("b1", (16,)), ("w2", (24, 16, 1, 1)), ("fc", (300, 10))]]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]),
             helper.make_node("Reshape", ["c2", "shape"], ["flat"]),
             helper.make_node("MatMul", ["flat", "fc"], ["y"])]
    init.append(numpy_helper.from_array(np.array([8, -1], np.int64), "shape"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 10])], init)
    return make_model(graph)


@pytest.fixture(scope="module")
def tasks():
    graph = optimize(import_onnx(_model()), 3, CUDA)
    return extract_tasks(graph, CUDA)


def test_gpu_templates_are_their_own(tasks):
    assert tunable_ops(CUDA) == ["Conv", "ConvIntegerPacked", "MatMul", "MatMulIntegerPacked"]
    assert sorted(t.template.op for t in tasks) == ["Conv", "Conv", "MatMul"]
    assert all(t.template.target_kind == "cuda" and len(t.space) > 50 for t in tasks)
    for t in tasks:  # the untuned kernel is a point of its space
        assert t.space.default is not None and t.valid(t.space.default)


def _run_emulated(tmp_path, func, seed=0):
    lib = load_kernels(build_library([func], get_target("native"), tmp_path / f"{func.name}.so"))
    sig = lib.signatures[func.name]
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(p["shape"]).astype(np.float32) if k < sig["num_inputs"] else
              np.zeros(p["shape"], np.float32) for k, p in enumerate(sig["params"])]
    lib.call(func.name, *arrays)
    return arrays[sig["num_inputs"]:sig["num_inputs"] + sig["num_outputs"]]


def test_random_configs_compute_what_the_default_does(tasks, tmp_path):
    rng = random.Random(3)
    for task in tasks:
        want = _run_emulated(tmp_path, task.instantiate(None, f"ref_{task.key[:6]}"))
        configs = [task.space.get(i) for i in rng.sample(range(len(task.space)), min(60, len(task.space)))]
        checked = 0
        for config in [c for c in configs if task.valid(c)][:3]:
            got = _run_emulated(tmp_path, task.instantiate(config, f"c{config.index}_{task.key[:6]}"))
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"{task.name} {config.values}")
            checked += 1
        assert checked, f"{task.name}: no valid config among 60 random ones"


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
def test_builder_makes_ptx_bundles(tasks, tmp_path):
    task = tasks[0]
    config = next(c for c in (task.space.get(i) for i in range(len(task.space))) if task.valid(c))
    (result,) = LocalBuilder(tmp_path, n_parallel=0).build(task, [config])
    assert result.lib.endswith(".cuda.json"), result.error_msg
    bundle = json.loads(open(result.lib).read())
    assert bundle["launches"][result.name]["block"][0] >= 1
    assemble(bundle["ptx"], "sm_90")


@pytest.mark.skipif(not gpu_available(), reason="no NVIDIA GPU and driver")
def test_tuner_measures_on_the_gpu(tasks):
    task = tasks[0]
    configs = [c for c in (task.space.get(i) for i in range(0, len(task.space), 97)) if task.valid(c)][:4]
    _, results = Measurer(task).measure(configs)
    assert any(r.ok for r in results), [r.error_msg for r in results]
    assert all(r.mean_cost < 1.0 for r in results if r.ok)  # seconds: a sanity bound, not a timing
