"""Packs the constant right operand of MatMul (dense layers) into panels at compile time, so that
the kernel's micro-kernel streams it contiguously and no packing runs per inference."""
from __future__ import annotations

import dataclasses

import numpy as np

from core.graph.ir import Graph, Node, TensorType
from core.packing.panels import PANEL, TILE_ROWS, pack_weights, worth_packing

from .registry import register_pass
from .rewrite import fresh_name


@register_pass("pack_matmul_weights")
def pack_matmul_weights(graph: Graph, panel: int = PANEL, tile_rows: int = TILE_ROWS) -> Graph:
    """MatMul(A, W) with W a constant worth packing -> MatMul(A, W_packed, packed_columns=N), W in
    panels `panel` columns wide. `panel` x `tile_rows` is the target's micro-kernel (packing.panels.
    micro_tile); where it is not the default, every MatMul worth packing carries it in its attributes
    (`tile_rows`, and `panel` where B is packed at run time), and the compute tiles for it."""
    rows = {"tile_rows": tile_rows} if tile_rows != TILE_ROWS else {}
    runtime_tile = {**({"panel": panel} if panel != PANEL else {}), **rows}
    constants, types = dict(graph.constants), dict(graph.types)
    packed: dict[str, str] = {}
    nodes: list[Node] = []
    for node in graph.nodes:
        b = node.inputs[1] if node.op == "MatMul" and len(node.inputs) == 2 else None
        if b is None or node.attr("packed_columns") is not None:
            nodes.append(node)
            continue
        a_type, b_type = types[node.inputs[0]], types[b]
        m, (k, n) = a_type.shape[-2], b_type.shape[-2:]
        if not worth_packing(m, n, k, b_type.dtype, constant=b in constants):
            nodes.append(node)
            continue
        if b not in constants:  # packed by the kernel at run time (activation x activation)
            nodes.append(dataclasses.replace(node, attrs={**node.attrs, **runtime_tile}))
            continue
        if b not in packed:
            name = fresh_name(f"{b}_packed", types)
            value = pack_weights(np.asarray(constants[b]), panel)
            value.flags.writeable = False
            constants[name], types[name] = value, TensorType(value.shape, value.dtype.name)
            packed[b] = name
        attrs = {**node.attrs, "packed_columns": n, **rows}
        nodes.append(dataclasses.replace(node, inputs=(node.inputs[0], packed[b]), attrs=attrs))
    if not packed and not runtime_tile:
        return graph
    return graph.replace(nodes=tuple(nodes), constants=constants, types=types)
