"""Every graph op's definition; importing this package registers them all in core.graph.ops."""
from . import binary, conv, data_dependent, einsum, elementwise, fused, indexing, layout, matmul, normalization, pool, reduce, scatter  # noqa: F401
from . import blocked  # noqa: F401,E402 (after pool and conv: its variants wrap them)
from . import resize  # noqa: F401,E402
from . import sampling  # noqa: F401,E402
from . import pool_nd  # noqa: F401,E402
from . import unpool  # noqa: F401,E402
from . import conv_nd  # noqa: F401,E402
