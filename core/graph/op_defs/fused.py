"""Fused: a group of nodes made one kernel by the fusion pass; its `body` attribute is the group as
a graph (TVM's primitive function), evaluated node by node when folded or interpreted."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.ir import Graph, TensorType
from core.graph.ops import Pattern, register_op


def _body(attrs: Mapping) -> Graph:
    body = attrs.get("body")
    if not isinstance(body, Graph):
        raise ShapeError(f"Fused: attribute body must be a graph, got {type(body).__name__}")
    return body


def _fused_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    from core.graph.interpret import evaluate

    body = _body(attrs)
    results = evaluate(body, dict(zip(body.inputs, inputs)))
    return [results[o] for o in body.outputs]


@register_op("Fused", Pattern.OPAQUE, fold=_fused_fold)
def _fused(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    body = _body(attrs)
    if len(types) != len(body.inputs):
        raise ShapeError(f"Fused: body takes {len(body.inputs)} inputs, got {len(types)}")
    for name, t in zip(body.inputs, types):
        if t is not None and body.type_of(name) != t:
            raise ShapeError(f"Fused: input {name} is {t}, the body expects {body.type_of(name)}")
    return [body.type_of(o) for o in body.outputs]
