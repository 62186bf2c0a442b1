"""User-facing import failures: unsupported ops (all listed), garbage input, symbolic dims,
unsafe external data, and graph outputs that are inputs or constants."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import helper

from core.errors import InvalidModelError, ShapeError, UnsupportedOpError
from core.frontend import import_onnx
from core.graph.interpret import evaluate

F32 = "float32"


def test_every_unsupported_op_is_listed_with_its_opset(onnx_model):
    nodes = [
        helper.make_node("RandomNormalLike", ["x"], ["s"]),
        helper.make_node("RandomUniformLike", ["x"], ["a"]),
        helper.make_node("Bernoulli", ["s"], ["c"]),  # downstream of an unsupported op: still reported
        helper.make_node("RandomNormalLike", ["c"], ["y"]),
    ]
    model = onnx_model(nodes, {"x": (F32, [2, 3])}, {"y": F32, "a": F32}, opset=15)
    with pytest.raises(UnsupportedOpError) as info:
        import_onnx(model)
    assert str(info.value) == ("unsupported ONNX ops: Bernoulli (opset 15), RandomNormalLike (opset 15), "
                               "RandomUniformLike (opset 15)")
    assert info.value.ops == [("", "Bernoulli", 15), ("", "RandomNormalLike", 15), ("", "RandomUniformLike", 15)]


def test_custom_domain_op_is_reported_with_its_domain(onnx_model):
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Fancy", ["r"], ["y"], domain="com.acme")]
    model = onnx_model(nodes, {"x": (F32, [2])}, {"y": F32}, domains={"com.acme": 3})
    with pytest.raises(UnsupportedOpError, match=r"Fancy \(opset 3, domain com.acme\)"):
        import_onnx(model)


def test_unsupported_features_and_ops_are_reported_together(onnx_model):
    # RoiAlign's adaptive sampling_ratio=0 takes a per-roi sample count known only at run time.
    nodes = [helper.make_node("RoiAlign", ["x", "rois", "batch"], ["p"], sampling_ratio=0),
             helper.make_node("RandomNormalLike", ["x"], ["s"])]
    model = onnx_model(nodes, {"x": (F32, [1, 1, 4, 4]), "rois": (F32, [1, 4]), "batch": ("int64", [1])},
                       {"p": F32, "s": F32})
    with pytest.raises(UnsupportedOpError) as info:
        import_onnx(model)
    assert ("", "RoiAlign", 17) in info.value.ops and ("", "RandomNormalLike", 17) in info.value.ops


@pytest.mark.parametrize("data", [b"", b"\x00\x01garbage\xff\xfe" * 10, b"hello world, not protobuf", os.urandom(256)])
def test_garbage_bytes_are_not_a_model(data):
    with pytest.raises(InvalidModelError, match="not an ONNX model"):
        import_onnx(data)


def test_garbage_file_and_missing_file(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"PK\x03\x04 this is a zip file, not ONNX")
    with pytest.raises(InvalidModelError, match="not an ONNX model"):
        import_onnx(path)
    with pytest.raises(InvalidModelError, match="cannot read"):
        import_onnx(tmp_path / "missing.onnx")


def test_checker_failure_is_invalid_model(onnx_model):
    model = onnx_model([helper.make_node("Relu", ["x"], ["y"])], {"x": (F32, [2])}, {"y": F32})
    model.graph.node.append(helper.make_node("Relu", ["undefined"], ["z"]))
    with pytest.raises(InvalidModelError, match="not an ONNX model"):
        import_onnx(model.SerializeToString())


def _symbolic_model(onnx_model):
    model = onnx_model([helper.make_node("Relu", ["x"], ["y"])], {"x": (F32, ["batch", 3])}, {"y": F32})
    return model


def test_symbolic_dim_needs_input_shape(onnx_model):
    with pytest.raises(ShapeError) as info:
        import_onnx(_symbolic_model(onnx_model))
    message = str(info.value)
    assert "'x'" in message and "dim 0" in message and "'batch'" in message
    assert "--input-shape x=d0,d1,..." in message


def test_input_shapes_fix_symbolic_dims(onnx_model, check_ort):
    graph = check_ort(_symbolic_model(onnx_model), input_shapes={"x": (4, 3)})
    assert graph.type_of("x").shape == (4, 3)


@pytest.mark.parametrize("shapes,match", [({"x": (4, 5)}, "contradicts"), ({"x": (4,)}, "rank"),
                                          ({"nope": (1, 3)}, "unknown inputs")])
def test_bad_input_shapes(shapes, match, onnx_model):
    with pytest.raises(ShapeError, match=match):
        import_onnx(_symbolic_model(onnx_model), input_shapes=shapes)


def _save_with_external_weights(onnx_model, folder, location="weights.bin"):
    weights = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    model = onnx_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": (F32, [2, 64])}, {"y": F32},
                       initializers={"w": weights})
    path = folder / "model.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location=location, size_threshold=0)
    return path


def test_external_data_inside_the_folder_loads(tmp_path, onnx_model, ort_runner):
    path = _save_with_external_weights(onnx_model, tmp_path)
    graph = import_onnx(path)
    x = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)
    expected = ort_runner(onnx.load(str(path)), {"x": x})[0]
    np.testing.assert_allclose(evaluate(graph, {"x": x})["y"], expected, rtol=1e-5, atol=1e-5)


def _relocate(path, location):
    model = onnx.load(str(path), load_external_data=False)
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = location
    path.write_bytes(model.SerializeToString())


@pytest.mark.parametrize("location", ["../x", "../outside.bin", "sub/../../outside.bin", "/etc/passwd"])
def test_external_data_escaping_the_folder_is_rejected(location, tmp_path, onnx_model):
    folder = tmp_path / "upload"
    folder.mkdir()
    (tmp_path / "outside.bin").write_bytes(b"\0" * 64 * 32 * 4)
    path = _save_with_external_weights(onnx_model, folder)
    _relocate(path, location)
    with pytest.raises(InvalidModelError, match="escapes the model's folder"):
        import_onnx(path)


def test_external_data_symlink_out_of_the_folder_is_rejected(tmp_path, onnx_model):
    folder = tmp_path / "upload"
    folder.mkdir()
    path = _save_with_external_weights(onnx_model, folder)
    secret = tmp_path / "secret.bin"
    secret.write_bytes((folder / "weights.bin").read_bytes())
    (folder / "weights.bin").unlink()
    (folder / "weights.bin").symlink_to(secret)
    with pytest.raises(InvalidModelError, match="escapes the model's folder"):
        import_onnx(path)


def test_external_data_needs_a_path(tmp_path, onnx_model):
    path = _save_with_external_weights(onnx_model, tmp_path)
    with pytest.raises(InvalidModelError, match="external"):
        import_onnx(path.read_bytes())


def test_external_data_shorter_than_declared_is_rejected(tmp_path, onnx_model):
    path = _save_with_external_weights(onnx_model, tmp_path)
    (tmp_path / "weights.bin").write_bytes(b"\0" * 100)
    with pytest.raises(InvalidModelError, match="too short"):
        import_onnx(path)


def test_outputs_that_are_inputs_or_constants_are_produced_by_nodes(onnx_model, check_ort):
    nodes = [helper.make_node("Identity", ["x"], ["same"]), helper.make_node("Identity", ["c"], ["const_out"]),
             helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["r"], ["r_again"])]
    model = onnx_model(nodes, {"x": (F32, [2, 3])}, {"same": F32, "const_out": F32, "r": F32, "r_again": F32},
                       initializers={"c": np.arange(3, dtype=np.float32)})
    graph = check_ort(model)
    assert graph.outputs == ("same", "const_out", "r", "r_again")
    produced = {o for n in graph.nodes for o in n.outputs}
    assert set(graph.outputs) <= produced
    assert sorted(n.op for n in graph.nodes) == ["Identity", "Identity", "Identity", "Relu"]


def test_graph_outputs_naming_an_input_or_initializer_directly(onnx_model, ort_runner):
    model = onnx_model([helper.make_node("Relu", ["x"], ["y"])], {"x": (F32, [2, 3])},
                       {"y": F32, "x": (F32, [2, 3]), "w": (F32, [3])}, initializers={"w": np.ones(3, np.float32)})
    graph = import_onnx(model)
    # An output cannot share its value name with the input it returns, so only that one is renamed.
    assert graph.outputs[0] == "y" and graph.outputs[2] == "w" and graph.outputs[1].startswith("x_")
    assert sorted(n.op for n in graph.nodes) == ["Identity", "Identity", "Relu"]
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    for got, expected in zip(evaluate(graph, {"x": x}).values(), ort_runner(model, {"x": x})):
        np.testing.assert_array_equal(got, expected)


def test_output_names_and_input_names_are_kept(onnx_model):
    nodes = [helper.make_node("Add", ["in_a", "in_b"], ["t"]), helper.make_node("Relu", ["t"], ["final/out:0"])]
    graph = import_onnx(onnx_model(nodes, {"in_a": (F32, [2]), "in_b": (F32, [2])}, {"final/out:0": F32}))
    assert graph.inputs == ("in_a", "in_b") and graph.outputs == ("final/out:0",)
    assert graph.nodes[-1].outputs == ("final/out:0",)


def test_importer_does_not_modify_the_callers_model(tmp_path, onnx_model):
    path = _save_with_external_weights(onnx_model, tmp_path)
    model = onnx.load(str(path), load_external_data=False)
    before = model.SerializeToString()
    with pytest.raises(InvalidModelError):
        import_onnx(model)  # no folder known for an in-memory proto
    assert model.SerializeToString() == before
