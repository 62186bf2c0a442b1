"""Rewrites a patch-embedding Conv (kernel == stride, no padding: ViT's 16x16/16, SegFormer's 8x8/8)
as one MatMul over the image's patches, so it runs on the packed GEMM micro-kernel.

Such a conv reads every input pixel exactly once: its im2col is a pure rearrangement, and the conv
is [N*Ho*Wo, C*kh*kw] @ [C*kh*kw, M]. The direct conv kernel ran ViT's patch conv at ~42 GFLOP/s
against ~90 for the GEMM (znver3, one thread), and the rearrangements are two small gathers.

    x[N,C,H,W] -> Reshape [N,C,Ho,kh,Wo,kw] -> Transpose [N,Ho,Wo,C,kh,kw] -> Reshape [N*Ho*Wo, C*kh*kw]
    -> MatMul W^T [C*kh*kw, M] -> Add bias -> Reshape [N,Ho,Wo,M] -> Transpose [N,M,Ho,Wo]
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from core.graph.ir import Graph, Node, TensorType

from .registry import register_pass
from .rewrite import fresh_name

MIN_DEPTH = 256  # C*kh*kw below this (ConvNeXt/Swin 4x4 stems on 3 channels) leaves the direct conv
MIN_WINDOW = 16  # kh*kw: 2x2 downsampling convs stay convs (their rearrangement costs as much as the win)


def _patch_shape(node: Node, graph: Graph) -> Optional[tuple[int, int]]:
    """(kh, kw) when `node` is a float32 2-D Conv whose windows tile the input exactly, else None."""
    if node.op != "Conv" or len(node.inputs) < 2 or node.inputs[1] not in graph.constants:
        return None
    bias = node.inputs[2] if len(node.inputs) > 2 else ""
    if bias and bias not in graph.constants:
        return None
    x, w = graph.type_of(node.inputs[0]), graph.type_of(node.inputs[1])
    if len(x.shape) != 4 or x.dtype != "float32" or w.dtype != "float32":
        return None
    kh, kw = w.shape[2:]
    attrs = node.attrs
    if (tuple(attrs.get("strides", (1, 1))) != (kh, kw) or any(attrs.get("pads", (0,) * 4))
            or tuple(attrs.get("dilations", (1, 1))) != (1, 1) or attrs.get("group", 1) != 1
            or attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID")):
        return None
    if x.shape[2] % kh or x.shape[3] % kw or kh * kw < MIN_WINDOW or w.shape[1] * kh * kw < MIN_DEPTH:
        return None
    return kh, kw


@register_pass("patch_conv_as_matmul")
def patch_conv_as_matmul(graph: Graph) -> Graph:
    constants, types = dict(graph.constants), dict(graph.types)
    nodes: list[Node] = []
    changed = False

    def value(base: str, shape: tuple[int, ...]) -> str:
        name = fresh_name(base, types)
        types[name] = TensorType(shape, "float32")
        return name

    for node in graph.nodes:
        patch = _patch_shape(node, graph)
        if patch is None:
            nodes.append(node)
            continue
        kh, kw = patch
        n, c, h, w = graph.type_of(node.inputs[0]).shape
        m, ho, wo, depth = graph.type_of(node.inputs[1]).shape[0], h // kh, w // kw, c * kh * kw
        base = node.outputs[0]
        split = value(f"{base}_patches6d", (n, c, ho, kh, wo, kw))
        moved = value(f"{base}_patches_t", (n, ho, wo, c, kh, kw))
        rows = value(f"{base}_patches", (n * ho * wo, depth))
        weight = fresh_name(f"{node.inputs[1]}_as_matmul", types)
        matrix = np.ascontiguousarray(np.asarray(constants[node.inputs[1]]).reshape(m, depth).T)
        matrix.flags.writeable = False
        constants[weight], types[weight] = matrix, TensorType(matrix.shape, "float32")
        product = value(f"{base}_gemm", (n * ho * wo, m))
        new = [Node("Reshape", (node.inputs[0],), (split,), {"shape": (n, c, ho, kh, wo, kw)}, f"{node.name}_split"),
               Node("Transpose", (split,), (moved,), {"perm": (0, 2, 4, 1, 3, 5)}, f"{node.name}_gather"),
               Node("Reshape", (moved,), (rows,), {"shape": (n * ho * wo, depth)}, f"{node.name}_rows"),
               Node("MatMul", (rows, weight), (product,), {}, f"{node.name}_gemm")]
        if len(node.inputs) > 2 and node.inputs[2]:
            biased = value(f"{base}_biased", (n * ho * wo, m))
            new.append(Node("Add", (product, node.inputs[2]), (biased,), {}, f"{node.name}_bias"))
            product = biased
        grid = value(f"{base}_nhwc", (n, ho, wo, m))
        new += [Node("Reshape", (product,), (grid,), {"shape": (n, ho, wo, m)}, f"{node.name}_grid"),
                Node("Transpose", (grid,), node.outputs, {"perm": (0, 3, 1, 2)}, f"{node.name}_nchw")]
        nodes.extend(new)
        changed = True
    if not changed:
        return graph
    return graph.replace(nodes=tuple(nodes), constants=constants, types=types)
