"""Small CNNs quantized by ONNX Runtime's quantize_static (QDQ and QOperator form; per-tensor and per-channel
weights; uint8 and int8 activations) compile to integer ops (QDQ Add/Mul too, Sigmoid as a table) and match ONNX
Runtime within one quantization step."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import core
from core.driver.reference import reference_session
from core.frontend import import_onnx
from tests.backend_calls import optimize
from core.runtime import load

from .qdq_models import (assert_within_one_step, branchy_cnn, input_shape, output_step, quantize, residual_cnn,
                         temporal_cnn)

VARIANTS = [  # (model, per-channel weights, activations, QOperator form): each choice on each model
    (residual_cnn, True, "uint8", False),
    (residual_cnn, False, "int8", True),
    (branchy_cnn, True, "int8", False),
    (branchy_cnn, False, "uint8", True),
    (temporal_cnn, True, "uint8", False),
]


def _id(variant) -> str:
    build, per_channel, activations, operator_form = variant
    return (f"{build.__name__}-{'per_channel' if per_channel else 'per_tensor'}-{activations}-"
            f"{'qoperator' if operator_form else 'qdq'}")


@pytest.mark.parametrize("variant", VARIANTS, ids=_id)
def test_quantized_model_runs_on_integer_ops_and_matches_onnxruntime(variant, tmp_path):
    build, per_channel, activations, operator_form = variant
    path = quantize(build(), tmp_path, per_channel, activations, operator_form)
    model = onnx.load(path)

    optimized = optimize(import_onnx(model), 1)
    ops = {node.op for node in optimized.nodes}
    assert {"ConvInteger", "MatMulInteger", "Requantize"} <= ops
    assert not ops & {"Conv", "MatMul"}, f"float conv/matmul left: {sorted(ops)}"
    # The residual Add and the Sigmoid gate's Mul run as QLinearAdd/QLinearMul, the Sigmoid as a table.
    assert "QuantizedBinary" in ops and not ops & {"Mul", "Sigmoid"}, sorted(ops)
    assert ("LookupTable" in ops) == (build in (branchy_cnn, temporal_cnn))  # Sigmoid, LeakyRelu

    artifact = core.compile(model, target="native", opt_level=3)
    artifact.save(tmp_path / "model.tar.gz")
    session = reference_session(str(path), 1)
    step = output_step(model, "y")
    rng = np.random.default_rng(11)
    with load(tmp_path / "model.tar.gz") as module:
        for _ in range(3):
            x = rng.standard_normal(input_shape(model)).astype(np.float32)
            assert_within_one_step(module.run({"x": x})["y"], session.run(None, {"x": x})[0], step)
