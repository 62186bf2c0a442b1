"""Imports every op module so that their computes and schedules register (loaded lazily by the registry)."""
from . import broadcast, conv2d, elementwise, layer_norm, matmul, pool, reduce, softmax, transform  # noqa: F401
from .schedules import cpu  # noqa: F401
