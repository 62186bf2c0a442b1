"""Imports every op module so that their computes and schedules register (loaded lazily by the registry)."""
from . import (broadcast, conv2d, conv2d_nchwc, cumulative, data_dependent, einsum, elementwise, indexing,  # noqa: F401
               layer_norm, layout_transform, matmul, nms, pool, pool_nchwc, reduce, scatter, softmax, topk, transform)
from . import resize  # noqa: F401,E402
from . import grid_sample  # noqa: F401,E402
from . import pool_nd  # noqa: F401,E402
from . import unpool  # noqa: F401,E402
from . import deform  # noqa: F401,E402
from . import roi_align  # noqa: F401,E402
from . import conv_nd  # noqa: F401,E402
from .schedules import cpu  # noqa: F401
