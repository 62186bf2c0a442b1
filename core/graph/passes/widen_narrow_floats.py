"""Ops that accumulate (MatMul, reductions, softmax, normalization, pooling) on float16/bfloat16/float8 run
in float32 between two Casts, so that their sums are not rounded to 11 (8, 4) bits of mantissa at every
step: each op's result is rounded to its narrow dtype once, as ONNX Runtime and PyTorch compute them."""
from __future__ import annotations

import dataclasses

from core.graph.ir import Graph, Node, TensorType
from core.graph.op_defs._common import NARROW_FLOAT_DTYPES as _NARROW

# float16 too: LLVM rounds every half operation, so a long float16 sum stagnates just the same.
NARROW_FLOAT_DTYPES = _NARROW | {"float16"}

from .registry import register_pass
from .rewrite import fresh_name

# Elementwise ops round each result anyway; these would round every partial sum without widening.
ACCUMULATING_OPS = frozenset({"MatMul", "Conv", "ReduceSum", "ReduceMean", "ReduceProd", "Softmax", "LogSoftmax",
                              "LayerNormalization", "CumSum", "CumProd", "AveragePool", "GlobalAveragePool", "Einsum"})


@register_pass("widen_narrow_floats")
def widen_narrow_floats(graph: Graph) -> Graph:
    types = dict(graph.types)
    nodes: list[Node] = []
    for node in graph.nodes:
        narrow = [v for v in (*node.inputs, *node.outputs) if v and types[v].dtype in NARROW_FLOAT_DTYPES]
        if node.op not in ACCUMULATING_OPS or not narrow:
            nodes.append(node)
            continue
        inputs = [_widened(v, types, nodes) for v in node.inputs]
        outputs, narrowing = [], []
        for value in node.outputs:
            if types[value].dtype not in NARROW_FLOAT_DTYPES:
                outputs.append(value)
                continue
            wide = fresh_name(f"{value}_f32", types)
            types[wide] = TensorType(types[value].shape, "float32")
            outputs.append(wide)
            narrowing.append(Node("Cast", (wide,), (value,), {"to": types[value].dtype}))
        nodes.append(dataclasses.replace(node, inputs=tuple(inputs), outputs=tuple(outputs)))
        nodes.extend(narrowing)
    if len(nodes) == len(graph.nodes):
        return graph
    return graph.replace(nodes=tuple(nodes), types=types)


def _widened(value: str, types: dict[str, TensorType], nodes: list[Node]) -> str:
    """`value` as float32 (a Cast appended to `nodes`) when it is a narrow float; else as it is."""
    if not value or types[value].dtype not in NARROW_FLOAT_DTYPES:
        return value
    wide = fresh_name(f"{value}_f32", types)
    types[wide] = TensorType(types[value].shape, "float32")
    nodes.append(Node("Cast", (value,), (wide,), {"to": "float32"}))
    return wide
