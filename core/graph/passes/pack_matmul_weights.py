"""Packs the constant right operand of MatMul (dense layers) into panels at compile time, so that
the kernel's micro-kernel streams it contiguously and no packing runs per inference."""
from __future__ import annotations

import dataclasses

import numpy as np

from core.graph.ir import Graph, Node, TensorType
from core.packing.panels import pack_weights, worth_packing

from .registry import register_pass
from .rewrite import fresh_name


@register_pass("pack_matmul_weights")
def pack_matmul_weights(graph: Graph) -> Graph:
    """MatMul(A, W) with W a constant worth packing -> MatMul(A, W_packed, packed_columns=N)."""
    constants, types = dict(graph.constants), dict(graph.types)
    packed: dict[str, str] = {}
    nodes: list[Node] = []
    for node in graph.nodes:
        b = node.inputs[1] if node.op == "MatMul" and len(node.inputs) == 2 else None
        if b is None or b not in constants or node.attr("packed_columns") is not None:
            nodes.append(node)
            continue
        a_type, b_type = types[node.inputs[0]], types[b]
        m, (k, n) = a_type.shape[-2], b_type.shape[-2:]
        if not worth_packing(m, n, k, b_type.dtype):
            nodes.append(node)
            continue
        if b not in packed:
            name = fresh_name(f"{b}_packed", types)
            value = pack_weights(np.asarray(constants[b]))
            value.flags.writeable = False
            constants[name], types[name] = value, TensorType(value.shape, value.dtype.name)
            packed[b] = name
        attrs = dict(node.attrs, packed_columns=n)
        nodes.append(dataclasses.replace(node, inputs=(node.inputs[0], packed[b]), attrs=attrs))
    if not packed:
        return graph
    return graph.replace(nodes=tuple(nodes), constants=constants, types=types)
