"""Every graph op's definition; importing this package registers them all in core.graph.ops."""
from . import (binary, conv, conv_nd, data_dependent, einsum, elementwise, fused, indexing, layout,  # noqa: F401
               matmul, ml, normalization, pool, pool_nd, reduce, resize, sampling, scatter, unpool)
from . import blocked  # noqa: F401,E402 (after pool and conv: its variants wrap them)
from . import conv_nd_blocked  # noqa: F401,E402 (ConvND on NCDHW[x]c)
from . import integer  # noqa: F401,E402 (MatMulInteger, ConvInteger)
from . import integer_blocked  # noqa: F401,E402 (their channels-last forms, after integer)
from . import quantize  # noqa: F401,E402 (DequantizeLinear, QuantizeLinear, Requantize)
from . import attention  # noqa: F401,E402 (SoftmaxAttention: fuse_attention's fused Q.Kt, softmax and .V)
from . import recurrent  # noqa: F401,E402 (LSTMSequence, GRUSequence: a layer direction's steps in one op)
from . import control_flow  # noqa: F401,E402 (If and Loop at run time: branches and bodies as graphs)
