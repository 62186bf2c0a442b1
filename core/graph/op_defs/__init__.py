"""Every graph op's definition; importing this package registers them all in core.graph.ops."""
from . import (binary, conv, conv_nd, data_dependent, einsum, elementwise, fused, indexing, layout,  # noqa: F401
               matmul, ml, normalization, pool, pool_nd, reduce, resize, sampling, scatter, unpool)
from . import blocked  # noqa: F401,E402 (after pool and conv: its variants wrap them)
