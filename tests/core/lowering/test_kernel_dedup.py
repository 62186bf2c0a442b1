"""Kernel deduplication (core/tir/kernel_dedup.py): identical kernels compile once and are called at each site."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import core
from tests.backend_calls import build_executable, optimize
from core.frontend import import_onnx
from core.tir.kernel_dedup import share_identical, structural_key
from core.target import get_target
from core.driver.validate import compare, index_bounds, onnxruntime_session, random_inputs


def _layers(count: int, width: int = 16) -> bytes:
    """`count` identical MatMul+Add+Relu+Softmax layers with different weights."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for k in range(count):
        inits += [numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32), f"w{k}"),
                  numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), f"b{k}")]
        nodes += [helper.make_node("MatMul", [x, f"w{k}"], [f"m{k}"]),
                  helper.make_node("Add", [f"m{k}", f"b{k}"], [f"a{k}"]),
                  helper.make_node("Relu", [f"a{k}"], [f"r{k}"]),
                  helper.make_node("Softmax", [f"r{k}"], [f"y{k}"], axis=-1)]
        x = f"y{k}"
    graph = helper.make_graph(nodes, "layers", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, width])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [4, width])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _executable(model: bytes):
    target = get_target("native")
    graph = optimize(import_onnx(model), 3, target)
    return build_executable(graph, target)


def test_identical_layers_share_one_function_per_kernel_kind():
    one, three = _executable(_layers(1)), _executable(_layers(3))
    assert len(three.kernels) == 3 * len(one.kernels)
    assert len(three.funcs) == len(one.funcs)  # the second and third layer reuse the first's functions
    per_layer = len(one.kernels)
    for k, info in enumerate(three.kernels):
        assert info.func == three.kernels[k % per_layer].name
    calls = three.plan.calls
    assert [c.func for c in calls] == [k.func for k in three.kernels]
    assert [c.label for c in calls] == [k.name for k in three.kernels]  # the profile names every call
    assert {f.name for f in three.funcs} == {k.func for k in three.kernels}


def test_kernels_of_different_shapes_are_not_shared():
    def matmul(m: int):
        graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, 8]),
                                   helper.make_tensor_value_info("w", TensorProto.FLOAT, [8, 8])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, 8])])
        return _executable(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())

    a, b, a2 = matmul(4).funcs[0], matmul(5).funcs[0], matmul(4).funcs[0]
    assert structural_key(a) == structural_key(a2)
    assert structural_key(a) != structural_key(b)
    unique, called = share_identical([a, b, a2])
    assert unique == [a, b]
    assert called == [a.name, b.name, a.name]


def test_deduplicated_model_matches_onnxruntime_and_reports_every_call(tmp_path):
    model = _layers(3)
    artifact = core.compile(model, target="native", benchmark=True)
    assert artifact.report["validation"]["passed"]
    kernels = artifact.report["kernels"]
    assert len(kernels) == 3 * len(_executable(_layers(1)).kernels)
    assert all(k["time_ms"] is not None for k in kernels)  # shared functions' time is reported per call
    path = artifact.save(tmp_path / "layers.tar.gz")
    graph = import_onnx(model)
    feeds = random_inputs(graph, 3, index_bounds(graph))
    expected = dict(zip(graph.outputs, onnxruntime_session(model, 2).run(list(graph.outputs), feeds)))
    module = core.load(path)
    try:
        result = compare(module.run(feeds), expected)
        names = [row["name"] for row in module.profile(repeat=1)]
    finally:
        module.close()
    assert result.ok, result
    assert names == [k["name"] for k in kernels]
