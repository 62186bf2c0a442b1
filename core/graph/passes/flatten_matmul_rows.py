"""MatMul(A[..., M, K], B[K, N]) with several leading batches of A as one GEMM over all of A's rows.

A 2-D right operand is shared by every batch, and A is row-major, so A is a [P*M, K] matrix as it lies in
memory. Left batched, the kernel runs P products of M rows each: torch's MultiheadAttention feeds its input
projection a [seq, batch=1, embed] tensor, which made ViT-B/16's QKV projection 197 products of one row (102
GFLOP/s against ~400 for the same layer as one GEMM). The Reshapes on either side are views, but the one after
the GEMM keeps its bias/activation epilogue out of the GEMM's kernel: so only batches of fewer rows than the
micro-kernel's register tile, which waste most of each tile, are flattened."""
from __future__ import annotations

import math

from core.graph.ir import Graph, Node, TensorType
from core.packing.panels import TILE_ROWS

from .registry import register_pass
from .rewrite import fresh_name


@register_pass("flatten_matmul_rows")
def flatten_matmul_rows(graph: Graph) -> Graph:
    types = dict(graph.types)
    nodes: list[Node] = []
    changed = False
    for node in graph.nodes:
        if node.op != "MatMul" or len(node.inputs) != 2 or node.attrs:
            nodes.append(node)
            continue
        a_type, b_type = types[node.inputs[0]], types[node.inputs[1]]
        batches = math.prod(a_type.shape[:-2]) if len(a_type.shape) > 2 else 1
        if len(b_type.shape) != 2 or batches == 1 or a_type.shape[-2] >= TILE_ROWS:
            nodes.append(node)
            continue
        (m, k), n = a_type.shape[-2:], b_type.shape[1]
        out_type = types[node.outputs[0]]
        rows = fresh_name(f"{node.outputs[0]}_rows", types)
        types[rows] = TensorType((batches * m, k), a_type.dtype)
        product = fresh_name(f"{node.outputs[0]}_gemm", types)
        types[product] = TensorType((batches * m, n), out_type.dtype)
        nodes += [Node("Reshape", (node.inputs[0],), (rows,), {"shape": (batches * m, k)}, f"{node.name}_rows"),
                  Node("MatMul", (rows, node.inputs[1]), (product,), {}, node.name),
                  Node("Reshape", (product,), node.outputs, {"shape": tuple(out_type.shape)}, f"{node.name}_batches")]
        changed = True
    return graph.replace(nodes=tuple(nodes), types=types) if changed else graph
