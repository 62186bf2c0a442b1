"""Artifacts whose inputs, weights and outputs are bfloat16, float8 and (packed in the model) int4: saved,
loaded through core.runtime.load and run, compared with an ml_dtypes reference; the C header's types."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import core
from core.runtime import loader as loader_module


def _model() -> onnx.ModelProto:
    w4 = np.array([[-8, -3, 0, 7], [1, 2, -1, 5], [3, -4, 6, -7]], ml_dtypes.int4)  # packed two per byte on disk
    w8 = np.array([0.5, -1.75, 448, -0.015625], ml_dtypes.float8_e4m3fn)
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["square"]),                                     # bfloat16 arithmetic
        helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
        helper.make_node("DequantizeLinear", ["w4", "s4"], ["w4f"]),                          # int4 weight
        helper.make_node("DequantizeLinear", ["w8", "s8"], ["w8f"]),                          # float8 weight
        helper.make_node("Add", ["xf", "w4f"], ["sum4"]),
        helper.make_node("Mul", ["sum4", "w8f"], ["scaled"]),
        helper.make_node("QuantizeLinear", ["scaled", "s8", "z8"], ["q8"]),                   # float8 output
    ]
    graph = helper.make_graph(
        nodes, "narrow", [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [3, 4])],
        [helper.make_tensor_value_info("square", TensorProto.BFLOAT16, [3, 4]),
         helper.make_tensor_value_info("q8", TensorProto.FLOAT8E4M3FN, [3, 4])],
        [numpy_helper.from_array(w4, "w4"), numpy_helper.from_array(w8, "w8"),
         numpy_helper.from_array(np.float32(0.5), "s4"), numpy_helper.from_array(np.float32(2.0), "s8"),
         numpy_helper.from_array(np.zeros((), ml_dtypes.float8_e4m3fn), "z8")])
    opsets = [helper.make_opsetid("", 21)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = helper.find_min_ir_version_for(opsets, ignore_unknown=True)
    return model


def _reference(x: np.ndarray, model: onnx.ModelProto) -> tuple[np.ndarray, np.ndarray]:
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    xf = x.astype(np.float32)
    square = (xf * xf).astype(ml_dtypes.bfloat16)
    scaled = (xf + weights["w4"].astype(np.float32) * 0.5) * (weights["w8"].astype(np.float32) * 2.0)
    q8 = np.clip(scaled / 2.0, -448, 448).astype(ml_dtypes.float8_e4m3fn)
    return square, q8


def test_bfloat16_float8_int4_artifact_loads_and_runs(tmp_path):
    model = _model()
    artifact = core.compile(model, "native", 3, None, validate=True, benchmark=False)
    # ORT's Python API takes no ml_dtypes arrays: validation says so instead of failing the compile.
    assert "cannot exchange bfloat16, float8_e4m3fn tensors" in artifact.report["validation"]["skipped"]
    path = artifact.save(tmp_path / "narrow.tar.gz")
    x = (np.arange(12, dtype=np.float32).reshape(3, 4) * 1.37 - 5).astype(ml_dtypes.bfloat16)
    with core.runtime.load(str(path)) as module:
        assert [t["dtype"] for t in module.inputs] == ["bfloat16"]
        assert [t["dtype"] for t in module.outputs] == ["bfloat16", "float8_e4m3fn"]
        out = module.run({"x": x})
        from_raw = module.run({"x": x.view(np.uint16)})  # the same tensor given as its raw bits
    square, q8 = _reference(x, model)
    assert out["square"].dtype == ml_dtypes.bfloat16 and out["q8"].dtype == ml_dtypes.float8_e4m3fn
    np.testing.assert_array_equal(out["square"].view(np.uint16), square.view(np.uint16))
    np.testing.assert_array_equal(out["q8"].view(np.uint8), q8.view(np.uint8))
    np.testing.assert_array_equal(from_raw["q8"].view(np.uint8), q8.view(np.uint8))
    header = (artifact.directory / "kiln_model.h").read_text()
    assert "#define KILN_INPUT_0_CTYPE uint16_t" in header and "#define KILN_OUTPUT_1_CTYPE uint8_t" in header


def test_loader_without_ml_dtypes_passes_raw_bits(monkeypatch):
    monkeypatch.setattr(loader_module, "ml_dtypes", None)
    assert loader_module._np_dtype("bfloat16") == np.uint16
    assert loader_module._np_dtype("float8_e5m2") == np.uint8
    assert loader_module._np_dtype("int4") == np.uint8
    assert loader_module._np_dtype("float32") == np.float32


def test_header_documents_narrow_types_as_bytes():
    from core.runtime.header import render_header
    text = render_header({"inputs": [{"name": "x", "shape": [2], "dtype": "int4"}],
                          "outputs": [{"name": "y", "shape": [2], "dtype": "float8_e4m3fn"}]})
    assert "#define KILN_INPUT_0_CTYPE uint8_t" in text and "#define KILN_OUTPUT_0_CTYPE uint8_t" in text
    assert "one element per byte" in text


def test_random_inputs_without_ml_dtypes_keep_sub_byte_values_in_range(monkeypatch):
    monkeypatch.setattr(loader_module, "ml_dtypes", None)
    module = object.__new__(loader_module.Module)  # random_inputs reads only the input descriptions
    module._inputs = [{"name": "a", "shape": (64,), "dtype": "int2"}, {"name": "b", "shape": (64,), "dtype": "uint4"}]
    feeds = module.random_inputs(seed=1)
    assert feeds["a"].dtype == np.uint8 and feeds["a"].max() <= 3
    assert feeds["b"].dtype == np.uint8 and feeds["b"].max() <= 15


def test_compile_validates_against_onnx_reference_when_onnxruntime_lacks_the_kernel():
    nodes = [helper.make_node("Cast", ["x"], ["h"], to=TensorProto.BFLOAT16), helper.make_node("Mul", ["h", "h"], ["p"]),
             helper.make_node("Cast", ["p"], ["y"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "bf16_inside", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])])
    opsets = [helper.make_opsetid("", 17)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = helper.find_min_ir_version_for(opsets, ignore_unknown=True)
    artifact = core.compile(model, "native", 3, None, validate=True, benchmark=False)
    # No bfloat16 Mul in ORT: validated against ONNX's reference evaluator instead, and not benchmarked.
    validation = artifact.report["validation"]
    assert validation["reference"] == "onnx.reference" and validation["passed"], validation
    assert "ONNX Runtime cannot run this model" in artifact.report["latency_ms"]["skipped"]
    x = np.linspace(-3, 3, 8, dtype=np.float32)
    with artifact.load() as module:
        y = module.run({"x": x})["y"]
    xb = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(y, (xb * xb).astype(ml_dtypes.bfloat16).astype(np.float32))


def test_narrow_inputs_accept_raw_bits_and_npy_void_but_not_other_narrow_types():
    assert loader_module._raw_bits_of(np.dtype(np.uint8), "float8_e4m3fn")
    assert loader_module._raw_bits_of(np.dtype("V2"), "bfloat16")  # what np.load returns for a saved bfloat16 array
    assert not loader_module._raw_bits_of(np.dtype(ml_dtypes.int4), "float8_e4m3fn")
    assert not loader_module._raw_bits_of(np.dtype(np.int8), "float8_e4m3fn")
    assert not loader_module._raw_bits_of(np.dtype(np.uint8), "bfloat16")


def test_packed_int4_external_data_loads(tmp_path):
    """ONNX packs int4 two per byte in external data too: 10 values are 5 bytes, not 10."""
    w = np.array([[-8, -3, 0, 7, 1], [1, 2, -1, 5, 3]], ml_dtypes.int4)
    graph = helper.make_graph([helper.make_node("DequantizeLinear", ["w", "s"], ["y"])], "ext", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.float32(0.5), "s")])
    opsets = [helper.make_opsetid("", 21)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = helper.find_min_ir_version_for(opsets, ignore_unknown=True)
    path = tmp_path / "model.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="w.bin",
                    size_threshold=0)
    artifact = core.compile(str(path), "native", 1, None, validate=False, benchmark=False)
    with artifact.load() as module:
        np.testing.assert_array_equal(module.run({})["y"], w.astype(np.float32) * 0.5)
