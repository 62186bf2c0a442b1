"""End to end: ONNX model -> core.compile -> saved artifact -> core.runtime.load -> matches ONNX Runtime."""
from __future__ import annotations

import json
import tarfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import core
from core.errors import UnsupportedOpError
from tests.backend_calls import runs_on_host
from core.frontend import import_onnx
from core.driver.validate import compare, index_bounds, onnxruntime_session, random_inputs


def run_both(model_bytes, artifact_path, seed=3, input_shapes=None):
    graph = import_onnx(model_bytes, input_shapes=input_shapes)
    feeds = random_inputs(graph, seed, index_bounds(graph))
    session = onnxruntime_session(model_bytes, 2)
    expected = dict(zip(graph.outputs, session.run(list(graph.outputs), feeds)))
    module = core.load(artifact_path)
    try:
        actual = module.run(feeds)
    finally:
        module.close()
    return actual, expected


def small_cnn() -> bytes:
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((10, 8 * 4 * 4)).astype(np.float32), "w2")
    b2 = numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "b2")
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p1"], ["f1"]),
        helper.make_node("Gemm", ["f1", "w2", "b2"], ["y"], transB=1),
        helper.make_node("Softmax", ["y"], ["prob"], axis=1),
    ]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
                              [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [2, 10]),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])], [w1, b1, w2, b2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_small_cnn_matches_onnxruntime(tmp_path):
    model = small_cnn()
    artifact = core.compile(model, target="native", benchmark=False)
    path = artifact.save(tmp_path / "cnn.tar.gz")
    actual, expected = run_both(model, path)
    result = compare(actual, expected)
    assert result.ok, result
    assert artifact.report["validation"]["max_abs_err"] < 1e-4
    with tarfile.open(path) as tar:
        names = set(tar.getnames())
        meta = json.load(tar.extractfile("metadata.json"))
    assert {"libkiln_model.so", "kiln_model.h", "weights.bin", "metadata.json", "kiln_loader.py",
            "report.json", "report.html"} <= names
    assert [o["name"] for o in meta["outputs"]] == ["prob", "y"]


def test_swish_after_a_1x1_conv_on_a_one_row_image(tmp_path):
    # PP-OCRv4's recognizer: a 1x1 conv on a 1x40 image runs over 48 flattened pixels (3 vectors of 16);
    # its fused swish reads the conv twice, and the never-stored padding columns need not map back.
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((120, 60, 1, 1)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(120).astype(np.float32), "b"),
             numpy_helper.from_array(np.float32([1.5]), "beta")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"]), helper.make_node("Mul", ["c", "beta"], ["m"]),
             helper.make_node("Sigmoid", ["m"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    graph = helper.make_graph(nodes, "swish", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 60, 1, 40])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 120, 1, 40])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    path = core.compile(model, target="native", benchmark=False).save(tmp_path / "swish.tar.gz")
    result = compare(*run_both(model, path))
    assert result.ok, result


def test_report_has_stable_keys():
    artifact = core.compile(small_cnn(), target="native")
    report = artifact.report
    for key in ("schema", "model", "target", "opt_level", "compiler_version", "graph", "memory", "kernels",
                "tuning", "validation", "latency_ms", "timings_s"):
        assert key in report
    assert report["latency_ms"]["kiln"] > 0 and report["latency_ms"]["onnxruntime"] > 0
    assert all(k["time_ms"] and k["time_ms"] > 0 for k in report["kernels"])
    assert report["memory"]["arena_bytes"] <= report["memory"]["naive_bytes"]


def test_opt_levels_fuse_and_all_match_onnxruntime():
    reports = {level: core.compile(small_cnn(), target="native", opt_level=level, benchmark=False).report
               for level in (0, 3)}
    for report in reports.values():
        assert report["validation"]["passed"] and report["validation"]["max_abs_err"] < 1e-4
    o0, o3 = reports[0]["graph"], reports[3]["graph"]
    assert o0["kernels"] == o0["nodes_in"] and not o0["fusion_groups"] and o0["passes"] == []
    groups = {tuple(g["ops"]) for g in o3["fusion_groups"]}
    # The conv runs plain or on channel blocks (the target's vector width decides); either way its ReLU fuses.
    assert ("MatMul", "Add") in groups and (("Conv", "Relu") in groups or ("Conv2dNCHWc", "Relu") in groups), groups
    assert o3["kernels"] < o0["kernels"] and "fuse_ops" in o3["passes"]


def test_cross_target_compiles_without_running():
    artifact = core.compile(small_cnn(), target="x86-64-v4")
    assert artifact.metadata["target"] == "x86-64-v4"
    from core.target import get_target

    if not runs_on_host(get_target("x86-64-v4")):
        assert "skipped" in artifact.report["validation"]
    assert artifact.library.stat().st_size > 0


def test_unsupported_ops_are_all_listed():
    # Det is a real ONNX op Kiln does not compile; FancyOp lives in a custom domain.
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Det", ["a"], ["b"]),
             helper.make_node("FancyOp", ["b"], ["y"], domain="com.example")]
    graph = helper.make_graph(nodes, "bad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    with pytest.raises(UnsupportedOpError) as err:
        core.compile(model.SerializeToString())
    message = str(err.value)
    assert "Det (opset 17)" in message and "FancyOp" in message and "com.example" in message


SHARED = ["squeezenet1_1", "bert_tiny", "mobilenet_v2", "resnet18"]


@pytest.mark.slow
@pytest.mark.parametrize("level", [0, 1, 2, 3])
@pytest.mark.parametrize("name", SHARED)
def test_shared_model_matches_onnxruntime(name, level, models_dir, tmp_path):
    path = models_dir / f"{name}.onnx"
    artifact = core.compile(path, target="native", opt_level=level, benchmark=False)
    assert artifact.report["validation"]["max_abs_err"] < 1e-4
    saved = artifact.save(tmp_path / f"{name}.tar.gz")
    actual, expected = run_both(path.read_bytes(), saved, seed=11)
    result = compare(actual, expected)
    assert result.ok and result.max_abs_err < 1e-4, f"{name} -O{level}: {result}"
    graph, memory = artifact.report["graph"], artifact.report["memory"]
    assert memory["arena_bytes"] <= memory["naive_bytes"]
    if level >= 2:
        assert graph["kernels"] < graph["nodes_in"] and graph["fusion_groups"]
    else:
        assert not graph["fusion_groups"]


def _o3_report(models_dir, name):
    return core.compile(models_dir / f"{name}.onnx", target="native", opt_level=3, validate=False,
                        benchmark=False).report


@pytest.mark.slow
def test_resnet18_o3_fuses_every_conv_epilogue(models_dir):
    report = _o3_report(models_dir, "resnet18")
    lone = [k["ops"] for k in report["kernels"] if k["ops"] in (["BatchNormalization"], ["Relu"], ["Add"])]
    assert not lone, lone
    # -O3 runs resnet18's convs in NCHW8c (blocked): one transform in, one out (before the Flatten);
    # its 3x3 stride-1 convs by Winograd, the strided ones directly.
    kinds = {tuple(k["ops"]) for k in report["kernels"]}
    assert ("Conv2dNCHWc", "Relu") in kinds and ("Conv2dWinogradNCHWc", "Add", "Relu") in kinds
    assert sum(k["ops"][0] == "Conv2dWinogradNCHWc" for k in report["kernels"]) == 13
    assert all(k["ops"][0] in ("Conv2dNCHWc", "Conv2dWinogradNCHWc") for k in report["kernels"] if "Relu" in k["ops"])
    assert report["graph"]["layout_transforms"] == 2
    memory = report["memory"]
    assert memory["arena_bytes"] <= 0.4 * memory["naive_bytes"]


@pytest.mark.slow
def test_mobilenet_v2_o3_fuses_conv_and_clip(models_dir):
    report = _o3_report(models_dir, "mobilenet_v2")
    assert not [k for k in report["kernels"] if k["ops"] in (["Clip"], ["Add"])]
    # Every Conv+Clip is one kernel; at -O3 the whole network runs blocked (NCHW8c), entered and left once.
    assert sum(k["ops"] == ["Conv2dNCHWc", "Clip"] for k in report["kernels"]) == 35
    assert sum("LayoutTransform" in k["ops"] for k in report["kernels"]) == 2
    memory = report["memory"]
    assert memory["arena_bytes"] <= 0.4 * memory["naive_bytes"]
