"""The op registry: one OpDef per graph op, declaring type inference, fusion pattern, folding and FLOPs.

Ops are registered by the modules under `core/graph/op_defs/`, which core/graph/__init__ imports;
everything else (frontend, passes, kernels) looks them up here by name instead of branching on op names.
The passes' own per-op rules (layouts, padding, bounds, ...) are registered in core/graph/op_facts.py.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from .ir import Graph, Node, TensorType


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
FlopsFn = Callable[[Sequence[Optional[TensorType]], Sequence[TensorType], Mapping], int]


def one_per_output_element(inputs: Sequence[Optional[TensorType]], outputs: Sequence[TensorType],
                           attrs: Mapping) -> int:
    """The FLOPs of an op without multiply-adds: one operation per output element."""
    return sum(t.numel for t in outputs)


@dataclass(frozen=True)
class OpDef:
    name: str
    pattern: Pattern
    infer: InferFn  # input types + attrs -> output types (raises ShapeError on mismatch)
    fold: Optional[FoldFn] = None  # numpy evaluation for compile-time constant folding
    # input types (None: absent) + output types + attrs -> operations performed (the report's and tuner's GFLOP/s)
    flops: FlopsFn = one_per_output_element


_REGISTRY: dict[str, OpDef] = {}


def register_op(name: str, pattern: Pattern, fold: Optional[FoldFn] = None,
                flops: FlopsFn = one_per_output_element) -> Callable[[InferFn], InferFn]:
    """Decorator for an op's type-inference function: `@register_op("Relu", Pattern.ELEMWISE, fold=np_relu)`."""

    def wrap(infer: InferFn) -> InferFn:
        if name in _REGISTRY:
            raise ValueError(f"op {name} registered twice")
        _REGISTRY[name] = OpDef(name, pattern, infer, fold, flops)
        return infer

    return wrap


def get_op(name: str) -> OpDef:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"no graph op named {name!r}") from None


def node_flops(node: Node, graph: Graph) -> int:
    """The operations `node` performs (its op's `flops`), its values typed by `graph`."""
    inputs = [graph.type_of(i) if i else None for i in node.inputs]
    return get_op(node.op).flops(inputs, [graph.type_of(o) for o in node.outputs], node.attrs)


def all_ops() -> dict[str, OpDef]:
    return dict(_REGISTRY)
