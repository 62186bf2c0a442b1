"""Imports every op module so that their computes and schedules register (core/kernels/__init__ imports it)."""
from . import (broadcast, conv2d, conv2d_nchwc, conv2d_winograd, conv_nd, cumulative, data_dependent, deform, einsum,  # noqa: F401
               elementwise, grid_sample, indexing, layer_norm, layout_transform, matmul, nms, pool, pool_nchwc,
               pool_nd, reduce, resize, roi_align, scatter, softmax, topk, transform, tree_ensemble, unpool)
from .schedules import cpu  # noqa: F401 (the cuda schedules are the cuda backend's, registered when it loads)
from . import integer  # noqa: F401,E402 (MatMulInteger, ConvInteger and their packed forms)
from .schedules import integer as integer_schedules  # noqa: F401,E402
from . import quantize  # noqa: F401,E402 (DequantizeLinear, QuantizeLinear, Requantize)
from . import ml_coupling  # noqa: F401,E402 (SVM probability estimates)
from . import conv_nd_nchwc, pool_nd_nchwc  # noqa: F401,E402 (3-D convs and pools in NCDHW[x]c)
from . import attention  # noqa: F401,E402 (SoftmaxAttention, one loop program)
from . import recurrent  # noqa: F401,E402 (LSTMSequence, GRUSequence, one loop program each)
