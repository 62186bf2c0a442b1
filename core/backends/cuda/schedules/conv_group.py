"""Fused groups the implicit-GEMM convolution computes whole on tensor cores: a group-1 2-D Conv (NCHW) whose
weights are float16/bfloat16 (a half-precision model's, or a float32 model's under `--precision fp16|bf16`),
its input float32 or of the weights' dtype, followed by gemm_group's epilogue chain (Cast, bias or residual Add,
Relu, Sigmoid). The kernel reads the NCHW input in place (conv_mma.py's gathered A) and writes NCHW."""
from __future__ import annotations

import math
from typing import Optional, Sequence

from ....graph.ir import Graph, Node
from ....kernels.conv2d import conv_out_size
from ....kernels.gemm_plan.conv_mma import ConvShape
from .group_match import anchored, epilogue_chain, static_shape
from ....kernels.gemm_plan.gemm_mma import OPERAND_DTYPES, GemmProblem, conv_problem

MIN_K = 16  # one mma k step: a shallower K = C*KH*KW would be mostly zero padding


def match_conv_group(nodes: Sequence[Node], graph: Graph, outputs: Sequence[str]) -> Optional[tuple[GemmProblem, dict]]:
    """(the implicit-GEMM problem, role -> graph value) when the group is such a Conv and chain; None otherwise
    (the group keeps its scheduled loops)."""
    found = anchored(nodes, graph, outputs, "Conv")
    if found is None:
        return None
    at, node, w, widened = found
    x = node.inputs[0]
    tx, tw = graph.type_of(x), graph.type_of(w)
    if (tw.dtype not in OPERAND_DTYPES or tx.dtype not in (tw.dtype, "float32") or len(tx.shape) != 4
            or not static_shape(tx.shape) or not static_shape(tw.shape) or int(node.attr("group") or 1) != 1):
        return None
    (batch, channels, height, width), (out_channels, _, kh, kw) = tx.shape, tw.shape
    sh, sw = node.attr("strides") or (1, 1)
    top, left, bottom, right = node.attr("pads") or (0, 0, 0, 0)
    dh, dw = node.attr("dilations") or (1, 1)
    shape = ConvShape(batch, channels, height, width, out_channels, kh, kw,
                      conv_out_size(height, kh, sh, top, bottom, dh), conv_out_size(width, kw, sw, left, right, dw),
                      sh, sw, top, left, dh, dw)
    if (shape.gemm_mnk[2] < MIN_K or min(shape.out_h, shape.out_w) < 1
            or max(math.prod(tx.shape), math.prod(shape.output_shape)) >= 2 ** 31):  # the kernel's i32 offsets
        return None
    # The Conv's own bias, read as stored (a float16 model's bias: narrow, widened by a leading Cast).
    own_bias = {"bias": widened.get(node.inputs[2], node.inputs[2])} if len(node.inputs) > 2 and node.inputs[2] else {}
    chain = epilogue_chain(nodes[at + 1:], node.outputs[0], graph, {o for n in nodes for o in n.outputs},
                           lambda s: _per_channel(s, out_channels), shape.output_shape, own_bias)
    if chain is None or chain[0] != outputs[0]:
        return None
    _, steps, dtypes, extras = chain
    if own_bias:  # the Conv's own bias: the epilogue's first step
        steps, dtypes = ("bias", *steps), {**dtypes, "bias": graph.type_of(own_bias["bias"]).dtype}
    try:
        return conv_problem(shape, tw.dtype, graph.type_of(outputs[0]).dtype, steps,
                            dtypes.get("residual", ""), tx.dtype if tx.dtype != tw.dtype else "",
                            dtypes.get("bias", "")), {"a": x, "b": w, **extras}
    except ValueError:  # K or OC not whole 16-byte rows (e.g. a 7x7 conv of 3 channels)
        return None


def _per_channel(shape: tuple, channels: int) -> bool:
    """An Add operand broadcast along the output channels only: [C, 1, 1] or [1, C, 1, 1]."""
    trimmed = list(shape)
    while trimmed and trimmed[0] == 1 and len(trimmed) > 3:
        trimmed.pop(0)
    return len(trimmed) == 3 and trimmed[0] == channels and trimmed[1:] == [1, 1]


__all__ = ["match_conv_group", "MIN_K"]
