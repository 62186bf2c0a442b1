"""Imports every op module so that their computes and schedules register (loaded lazily by the registry)."""
from . import (broadcast, conv2d, conv2d_nchwc, conv2d_winograd, conv_nd, cumulative, data_dependent, deform, einsum,  # noqa: F401
               elementwise, grid_sample, indexing, layer_norm, layout_transform, matmul, nms, pool, pool_nchwc,
               pool_nd, reduce, resize, roi_align, scatter, softmax, topk, transform, tree_ensemble, unpool)
from .schedules import cpu, gpu  # noqa: F401
from . import ml_coupling  # noqa: F401,E402 (SVM probability estimates)
