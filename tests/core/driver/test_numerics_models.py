"""Models at other precisions validate under the default policy: float16 (onnxconverter_common), bfloat16 and
ONNX Runtime's own QDQ int8 (quantize_static); a tolerance no float32 model can meet names its first kernel."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import core
from core.errors import ValidationError


def float16_model(path):
    from onnxconverter_common import float16

    return float16.convert_float_to_float16(onnx.load(path), keep_io_types=False)


def qdq_int8_model(path, out):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Calibration(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.batches = iter([{"input": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)} for _ in range(2)])

        def get_next(self):
            return next(self.batches, None)

    quantize_static(str(path), str(out), Calibration(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    return out


def bfloat16_mlp():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    nodes = [helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16),
             helper.make_node("Cast", ["w"], ["wb"], to=TensorProto.BFLOAT16),
             helper.make_node("Cast", ["b"], ["bb"], to=TensorProto.BFLOAT16),
             helper.make_node("MatMul", ["xb", "wb"], ["m"]), helper.make_node("Add", ["m", "bb"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "bf16_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_bfloat16_model_validates_at_bfloat16_epsilon():
    val = core.compile(bfloat16_mlp(), benchmark=False).report["validation"]
    assert val["passed"] and val["reference"] == "onnx.reference"  # ORT has no bfloat16 Relu
    assert "bfloat16" in val["outputs"][0]["tolerance"]["why"]


@pytest.mark.slow
def test_a_float16_model_validates_under_the_default_policy(models_dir):
    val = core.compile(float16_model(models_dir / "squeezenet1_1.onnx"), benchmark=False).report["validation"]
    out = val["outputs"][0]
    assert val["passed"] and out["dtype"] == "float16" and "float16" in out["tolerance"]["why"]
    assert out["max_abs_err"] > 1e-4  # what the float32 rule used to refuse
    assert out["cosine"] > 0.9999 and out["top1"] == 1.0


@pytest.mark.slow
def test_an_onnxruntime_qdq_int8_model_validates_in_quantization_steps(models_dir, tmp_path):
    path = qdq_int8_model(models_dir / "squeezenet1_1.onnx", tmp_path / "qdq.onnx")
    val = core.compile(path, benchmark=False).report["validation"]
    out = val["outputs"][0]
    assert val["passed"] and "quantization step" in out["tolerance"]["why"] and out["top1"] == 1.0


@pytest.mark.slow
def test_resnet18_under_a_tolerance_of_1e_12_names_its_first_diverging_kernel(models_dir, tmp_path):
    with pytest.raises(ValidationError) as err:
        core.compile(models_dir / "resnet18.onnx", benchmark=False, tolerance="1e-12")
    message = str(err.value)
    assert "first diverging kernel k0" in message and "/conv1/Conv (Conv)" in message
    artifact = core.compile(models_dir / "resnet18.onnx", benchmark=False, tolerance="1e-12", validate="warn")
    val = artifact.report["validation"]
    first = val["first_divergent_kernel"]
    assert val["passed"] is False and {"name": "/conv1/Conv", "op": "Conv"} in first["onnx_nodes"]
    assert first["kernel"] in message and first["created_by"]
    errors = [k["max_abs_err"] for k in val["bisect"]["kernels"]]
    assert len(errors) > 10 and max(errors) > errors[0]  # the error grows kernel by kernel
    html = artifact.report_html
    assert first["kernel"] in html and "/conv1/Conv" in html and 'data-chart="kernel_errors"' in html
