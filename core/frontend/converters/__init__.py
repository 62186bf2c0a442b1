"""ONNX -> graph-IR converters, one module per op family; importing this package registers them."""
from . import contrib, contrib_gqa  # noqa: F401  (ONNX Runtime's com.microsoft ops)
from . import contrib_quantized  # noqa: F401  (com.microsoft QLinear*/QGemm as DQ -> op -> Q)
from . import (activations, attention, binary, causal_conv, constants, control_flow, conv, conv_transpose,  # noqa: F401
               data_dependent, einsum, elementwise, linalg, linear_attention, loss, ml_features,
               ml_linear, ml_svm, ml_tree_ensemble, ml_trees, normalization, pool,
               quantize, quantized_linalg, recurrent, reduce, resize, rotary, sampling, scatter, selection, sequence,
               shape, spectral)
from .registry import ConvertContext, UnsupportedFeature, converter, find_converter, supported_ops

__all__ = ["ConvertContext", "UnsupportedFeature", "converter", "find_converter", "supported_ops"]
