"""The converter registry picks the newest converter whose since_version <= the model's opset."""
from __future__ import annotations

import pytest

from core.frontend.converters import converter, find_converter, supported_ops
from core.frontend.converters.normalization import softmax, softmax_legacy
from core.frontend.converters.selection import slice_attrs, slice_inputs


@pytest.mark.parametrize("opset,expected", [(1, softmax_legacy), (12, softmax_legacy), (13, softmax), (21, softmax)])
def test_softmax_versions(opset, expected):
    assert find_converter("", "Softmax", opset) is expected
    assert find_converter("ai.onnx", "Softmax", opset) is expected


def test_slice_versions_and_missing_entries():
    assert find_converter("", "Slice", 9) is slice_attrs and find_converter("", "Slice", 10) is slice_inputs
    assert find_converter("", "Gemm", 6) is None  # before opset 7 Gemm had legacy broadcast semantics
    assert find_converter("", "NoSuchOp", 17) is None
    assert find_converter("com.microsoft", "Relu", 17) is None


def test_every_registered_opset_covers_11_to_21_for_core_ops():
    ops = supported_ops()
    for op in ["Conv", "Relu", "Add", "MatMul", "Gemm", "Reshape", "Softmax", "ReduceMean", "Slice", "Pad", "Clip"]:
        assert min(ops[("", op)]) <= 11, op


def test_duplicate_registration_is_refused():
    with pytest.raises(ValueError, match="registered twice"):
        converter("Relu", since_version=6)(lambda ctx: ctx.input(0))
