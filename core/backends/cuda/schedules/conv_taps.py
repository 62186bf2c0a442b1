"""Zero kernel taps that make a half-precision convolution's K whole 16-byte rows for the implicit GEMM (cuda)."""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from ....graph.ir import Graph, Node, TensorType
from ....graph.passes.rewrite import fresh_name
from ....kernels.gemm_plan.gemm_mma import CHUNK, OPERAND_DTYPES
from ....target import Target
from .conv_group import match_conv_group
from .group_match import anchored

# Zero taps are mma work for nothing: past a quarter more K the direct conv is left (a 3x3 conv of 3 channels,
# K 27 -> 72), while resnet's 7x7 stem over 3 channels (K 147 -> 168, +14%) moves to the tensor cores.
MAX_GROWTH = 0.25


def widen_kernel_rows(graph: Graph, target: Target) -> Graph:
    """Each Fused Conv group with a narrow constant weight whose K = C*KH*KW is not a multiple of 8 (the GEMM's B
    rows are copied 16 bytes at a time) computes the same convolution with `extra` zero taps at the right of every
    kernel row and `extra` more columns of right padding (each output still sees exactly its KW taps' inputs; the
    new taps multiply zeros or inputs by zero), so that K is; the group is rewritten only when the implicit GEMM
    then takes it."""
    if target.sm < 80:  # no tensor-core groups before sm_80
        return graph
    nodes, types, constants, changed = list(graph.nodes), dict(graph.types), dict(graph.constants), False
    for index, node in enumerate(nodes):
        rewritten = _widened(node, graph, types, constants) if node.op == "Fused" else None
        if rewritten is None:
            continue
        trial = graph.replace(types=types, constants=constants)
        if match_conv_group(list(rewritten.attr("body").nodes), trial, list(rewritten.outputs)) is not None:
            nodes[index], changed = rewritten, True
    if not changed:
        return graph
    read = {v for n in nodes for v in n.inputs} | set(graph.outputs)
    for value in [v for v in constants if v not in read]:  # the weights only the widened copies replace
        del constants[value], types[value]
    return graph.replace(nodes=tuple(nodes), types=types, constants=constants)


def taps_to_add(channels: int, kernel_h: int, kernel_w: int) -> Optional[int]:
    """The fewest zero columns that make channels * kernel_h * (kernel_w + extra) a multiple of CHUNK within
    MAX_GROWTH (None: none do, or K already is one)."""
    k = channels * kernel_h * kernel_w
    if k % CHUNK == 0:
        return None
    extra = next((e for e in range(1, CHUNK) if channels * kernel_h * (kernel_w + e) % CHUNK == 0), None)
    return extra if extra is not None and channels * kernel_h * extra <= MAX_GROWTH * k else None


def _widened(node: Node, graph: Graph, types: dict, constants: dict) -> Optional[Node]:
    """The Fused `node` reading a zero-widened copy of its Conv's weight (added to `types` and `constants`), or
    None when it is not such a group."""
    body = node.attr("body")
    found = anchored(list(body.nodes), graph, list(node.outputs), "Conv")
    if found is None:
        return None
    at, conv, weight, widened = found
    if weight not in graph.constants or graph.type_of(weight).dtype not in OPERAND_DTYPES or weight not in node.inputs:
        return None
    out_channels, channels, kernel_h, kernel_w = graph.type_of(weight).shape
    extra = taps_to_add(channels, kernel_h, kernel_w)
    if extra is None or int(conv.attr("group") or 1) != 1:
        return None
    dilation_w = (conv.attr("dilations") or (1, 1))[1]
    top, left, bottom, right = conv.attr("pads") or (0, 0, 0, 0)
    name = fresh_name(f"{weight}_taps", types)
    data = np.asarray(graph.constants[weight])
    shape = (out_channels, channels, kernel_h, kernel_w + extra)
    constants[name] = np.pad(data, ((0, 0), (0, 0), (0, 0), (0, extra)))
    types[name] = TensorType(shape, graph.type_of(weight).dtype)
    read = conv.inputs[1]  # the weight as the Conv reads it: its widened copy when a leading Cast widens it
    body_types = {**{k: v for k, v in body.types.items() if k != weight}, name: types[name]}
    if read != weight:  # (the graph's types hold its bodies' values too)
        body_types[read] = types[read] = TensorType(shape, body.type_of(read).dtype)
    attrs = {**conv.attrs, "pads": (top, left, bottom, right + extra * dilation_w)}
    if conv.attr("kernel_shape") is not None:
        attrs["kernel_shape"] = (kernel_h, kernel_w + extra)
    swap = lambda names: tuple(name if v == weight else v for v in names)  # noqa: E731
    body_nodes = [dataclasses.replace(n, inputs=swap(n.inputs)) for n in body.nodes]
    body_nodes[at] = dataclasses.replace(body_nodes[at], attrs=attrs)
    new_body = body.replace(inputs=swap(body.inputs), nodes=tuple(body_nodes), types=body_types)
    return dataclasses.replace(node, inputs=swap(node.inputs), attrs={**node.attrs, "body": new_body})


__all__ = ["widen_kernel_rows", "taps_to_add", "MAX_GROWTH"]
