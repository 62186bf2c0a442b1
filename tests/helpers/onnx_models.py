"""ONNX models built by tests at an IR version every supported onnxruntime reads (onnx 1.19+ writes IR 14, ORT 1.30 reads <= 13)."""
from __future__ import annotations

import onnx
from onnx import helper

# The IR version of ONNX 1.14's opset 19 era: every onnxruntime Kiln is tested against loads it, whatever the opset.
IR_VERSION = 8


def make_model(graph: onnx.GraphProto, opset: int = 17) -> onnx.ModelProto:
    """`graph` as a model of the default domain at `opset`, stamped with IR_VERSION (GPU test files run with
    --noconftest, so nothing else clamps it)."""
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)
