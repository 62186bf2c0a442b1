"""The op registry: one OpDef per graph op, declaring type inference, fusion pattern and folding.

Ops are registered by the modules under `core/graph/op_defs/`; everything else (frontend, passes,
kernels) looks them up here by name instead of branching on op names.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from .ir import TensorType


class Pattern(enum.IntEnum):
    """TVM's operator pattern kinds, ordered so that max() gives the pattern of a fused group."""

    ELEMWISE = 0  # out[i] = f(in[i])
    BROADCAST = 1  # elementwise with numpy broadcasting
    INJECTIVE = 2  # each output element reads a computable set of inputs (reshape, transpose, concat, gather)
    REDUCTION = 3  # reduces some axes (sum, max, mean, softmax's parts)
    OUT_ELEMWISE_FUSABLE = 4  # complex op whose output can take an elementwise epilogue (conv, matmul)
    OPAQUE = 8  # cannot be fused


InferFn = Callable[[Sequence[TensorType], Mapping], list[TensorType]]
FoldFn = Callable[[Sequence[np.ndarray], Mapping], list[np.ndarray]]


@dataclass(frozen=True)
class OpDef:
    name: str
    pattern: Pattern
    infer: InferFn  # input types + attrs -> output types (raises ShapeError on mismatch)
    fold: Optional[FoldFn] = None  # numpy evaluation for compile-time constant folding


_REGISTRY: dict[str, OpDef] = {}


def register_op(name: str, pattern: Pattern, fold: Optional[FoldFn] = None) -> Callable[[InferFn], InferFn]:
    """Decorator for an op's type-inference function: `@register_op("Relu", Pattern.ELEMWISE, fold=np_relu)`."""

    def wrap(infer: InferFn) -> InferFn:
        if name in _REGISTRY:
            raise ValueError(f"op {name} registered twice")
        _REGISTRY[name] = OpDef(name, pattern, infer, fold)
        return infer

    return wrap


def get_op(name: str) -> OpDef:
    _load_definitions()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"no graph op named {name!r}") from None


def all_ops() -> dict[str, OpDef]:
    _load_definitions()
    return dict(_REGISTRY)


def _load_definitions() -> None:
    # Importing the package registers every op exactly once.
    from . import op_defs  # noqa: F401
