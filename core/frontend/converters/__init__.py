"""ONNX -> graph-IR converters, one module per op family; importing this package registers them."""
from . import binary, constants, conv, data_dependent, einsum, elementwise, linalg, normalization, pool, reduce, scatter, selection, shape  # noqa: F401
from . import loss  # noqa: F401
from . import attention, causal_conv, linear_attention, rotary  # noqa: F401
from . import recurrent  # noqa: F401
from . import activations  # noqa: F401,E402
from . import resize  # noqa: F401,E402
from . import sampling  # noqa: F401,E402
from . import conv_transpose  # noqa: F401,E402
from . import spectral  # noqa: F401,E402
from . import control_flow, sequence  # noqa: F401,E402
from . import quantize  # noqa: F401,E402
from . import quantized_linalg  # noqa: F401,E402
from .registry import ConvertContext, UnsupportedFeature, converter, find_converter, supported_ops

__all__ = ["ConvertContext", "UnsupportedFeature", "converter", "find_converter", "supported_ops"]
