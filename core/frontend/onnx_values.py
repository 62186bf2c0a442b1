"""ONNX protobuf values -> Python/numpy: dtypes, tensors and node attributes."""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from core.errors import InvalidModelError, ShapeError

_DTYPES = {
    onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.DOUBLE: "float64", onnx.TensorProto.FLOAT16: "float16",
    onnx.TensorProto.INT8: "int8", onnx.TensorProto.INT16: "int16", onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.INT64: "int64", onnx.TensorProto.UINT8: "uint8", onnx.TensorProto.UINT16: "uint16",
    onnx.TensorProto.UINT32: "uint32", onnx.TensorProto.UINT64: "uint64", onnx.TensorProto.BOOL: "bool",
    # Narrow dtypes by their ml_dtypes names (core/narrow_dtypes.py); numpy_helper unpacks 4/2-bit data.
    onnx.TensorProto.BFLOAT16: "bfloat16", onnx.TensorProto.FLOAT8E4M3FN: "float8_e4m3fn",
    onnx.TensorProto.FLOAT8E4M3FNUZ: "float8_e4m3fnuz", onnx.TensorProto.FLOAT8E5M2: "float8_e5m2",
    onnx.TensorProto.FLOAT8E5M2FNUZ: "float8_e5m2fnuz", onnx.TensorProto.FLOAT4E2M1: "float4_e2m1fn",
    onnx.TensorProto.INT4: "int4", onnx.TensorProto.UINT4: "uint4",
    **({onnx.TensorProto.FLOAT8E8M0: "float8_e8m0fnu"} if hasattr(onnx.TensorProto, "FLOAT8E8M0") else {}),
    **({onnx.TensorProto.INT2: "int2", onnx.TensorProto.UINT2: "uint2"} if hasattr(onnx.TensorProto, "INT2") else {}),
}


def numpy_dtype(elem_type: int, where: str) -> str:
    try:
        return _DTYPES[elem_type]
    except KeyError:
        known = elem_type in onnx.TensorProto.DataType.values()
        name = onnx.TensorProto.DataType.Name(elem_type) if known else elem_type
        raise ShapeError(f"{where}: element type {name} is not supported") from None


def tensor_to_array(tensor: onnx.TensorProto, where: str) -> np.ndarray:
    numpy_dtype(tensor.data_type, where)
    try:
        return numpy_helper.to_array(tensor)
    except Exception as err:  # protobuf data that does not match its declared dims or type
        raise InvalidModelError(f"not an ONNX model: tensor {tensor.name or where!r} is malformed ({err})") from None


def attribute_values(node: onnx.NodeProto) -> dict[str, Any]:
    """Decoded attributes: strings as str, ints/floats as Python numbers, tensors kept as TensorProto."""
    values: dict[str, Any] = {}
    for attribute in node.attribute:
        value = onnx.helper.get_attribute_value(attribute)
        if isinstance(value, bytes):
            value = value.decode("utf-8", errors="replace")
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode("utf-8", errors="replace") for v in value]
        values[attribute.name] = value
    return values


def declared_dims(tensor_type) -> list | None:
    """A tensor type's declared shape: ints for fixed dims, the dim_param (or "?") for symbolic ones.
    Some exporters (PaddlePaddle) write dim_value -1 for a dynamic dim: that is symbolic too."""
    if not tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else (d.dim_param or "?")
            for d in tensor_type.shape.dim]
