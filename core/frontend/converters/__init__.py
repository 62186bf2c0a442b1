"""ONNX -> graph-IR converters, one module per op family; importing this package registers them."""
from . import (activations, attention, binary, causal_conv, constants, control_flow, conv, conv_transpose,  # noqa: F401
               data_dependent, einsum, elementwise, linalg, linear_attention, loss, normalization, pool,
               quantize, quantized_linalg, recurrent, reduce, resize, rotary, sampling, scatter, selection, sequence,
               shape, spectral)
from .registry import ConvertContext, UnsupportedFeature, converter, find_converter, supported_ops

__all__ = ["ConvertContext", "UnsupportedFeature", "converter", "find_converter", "supported_ops"]
