"""AlterOpLayout for 3-D convs: ConvND regions (with their pools, Concats, elementwise ops) run in NCDHW[x]c (x =
the target's float lanes) with weights packed at compile time; LayoutTransforms only where a region starts or ends."""
from __future__ import annotations

from typing import Optional

import numpy as np

from core.graph.ir import Graph, Node
from core.graph.op_facts import Fact, elementwise_rule, op_rule
from core.packing.blocked import block_for, grouped_blocking, pack_channel_vector, pack_weights

from .alter_layout import MIN_BLOCK_SHARE, _Rewriter, rewrite_regions
from .registry import register_pass

RANK = 5  # NCDHW: the plain rank of the values this pass blocks (2-D convs are alter_layout's)


def conv_nd_blocks(node: Node, graph: Graph, lanes: int) -> Optional[tuple[int, int, bool, int]]:
    """(input block, output block, depthwise, group) when a ConvND can run in NCDHW[x]c, else None: float32
    with constant weights and bias, dense, depthwise, or grouped with whole blocks inside each group."""
    x, w = node.inputs[0], node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) > 2 else ""
    if w not in graph.constants or (bias and bias not in graph.constants) or x in graph.constants:
        return None
    xt, wt = graph.type_of(x), graph.type_of(w)
    if xt.rank != RANK or wt.rank != RANK or xt.dtype != "float32":
        return None
    group, (oc, cg), ic = node.attr("group", 1), wt.shape[:2], xt.shape[1]
    depthwise = group > 1 and group == ic == oc and cg == 1
    if group > 1 and not depthwise:
        blocking = grouped_blocking(ic, oc, group, lanes, -(-lanes // MIN_BLOCK_SHARE))
        if blocking is None or blocking[1] != group:  # blocks of several narrow groups: not for 3-D yet
            return None
        return blocking[0], blocking[0], False, group
    ob = block_for(oc, lanes)
    if ob * MIN_BLOCK_SHARE < lanes:
        return None
    return (ob if depthwise else block_for(ic, lanes)), ob, depthwise, group


@op_rule(Fact.LAYOUT_3D, "ConvND")
def _conv(rw: _Rewriter, node: Node) -> bool:
    blocks = conv_nd_blocks(node, rw.graph, rw.lanes)
    if blocks is None:
        return False
    ib, ob, depthwise, group = blocks
    w = node.inputs[1]
    inputs = [rw.as_blocked(node.inputs[0], ib),
              rw.add_constant(f"{w}_packed", pack_weights(rw.graph.constants[w], ib, ob, depthwise))]
    if len(node.inputs) > 2 and node.inputs[2]:
        bias = node.inputs[2]
        inputs.append(rw.add_constant(f"{bias}_packed", pack_channel_vector(rw.graph.constants[bias], ob)))
    attrs = {k: node.attr(k) for k in ("strides", "pads", "dilations")}
    attrs.update(group=group, depthwise=depthwise)
    rw.emit_blocked(node, "ConvNDNCHWc", inputs, attrs, ob)
    return True


@op_rule(Fact.LAYOUT_3D, "PoolND")
def _pool(rw: _Rewriter, node: Node) -> bool:
    """Max and average pools stay blocked inside a region (a U-Net's down-sampling); they never start one."""
    block = rw.block_of(node.inputs[0])
    if block is None or node.attr("mode") not in ("max", "avg") or rw.graph.type_of(node.inputs[0]).rank != RANK:
        return False
    rw.emit_blocked(node, "PoolNDNCHWc", [rw.blocked[node.inputs[0]][0]], node.attrs, block)
    return True


@op_rule(Fact.LAYOUT_3D, "Concat")
def _concat(rw: _Rewriter, node: Node) -> bool:
    """A channel Concat of values blocked alike is a Concat of their channel blocks."""
    blocks = {rw.block_of(i) for i in node.inputs}
    if node.attr("axis") not in (1, -RANK) or len(blocks) != 1 or None in blocks:
        return False
    (block,) = blocks
    rw.emit_blocked(node, "Concat", [rw.blocked[i][0] for i in node.inputs], {"axis": 1}, block)
    return True


def _blocked_constant(value: np.ndarray, channels: int, block: int) -> Optional[np.ndarray]:
    """A scalar stays; a per-channel constant ((C,1,1,1), (1,C,1,1,1)) becomes (1, C/x, 1, 1, 1, x); else None."""
    if value.size == 1:
        return value
    if value.ndim > RANK:
        return None
    shape = (1,) * (RANK - value.ndim) + value.shape
    if shape[0] != 1 or shape[2:] != (1,) * (RANK - 2) or shape[1] != channels:
        return None
    return pack_channel_vector(value.reshape(-1), block).reshape((1, -1) + (1,) * (RANK - 2) + (block,))


@elementwise_rule(Fact.LAYOUT_3D)
def _elementwise(rw: _Rewriter, node: Node) -> bool:
    """Elementwise ops on a blocked value stay blocked when their other operands are blocked values of the
    same shape, scalars or per-channel constants (a residual Add, the ReLU after a conv)."""
    if len(node.outputs) != 1 or rw.graph.type_of(node.outputs[0]).rank != RANK:
        return False
    out = rw.graph.type_of(node.outputs[0])
    blocks = [rw.block_of(i) for i in node.inputs if i and rw.block_of(i)]
    if not blocks or out.shape[1] % blocks[0]:
        return False
    block = blocks[0]
    inputs = []
    for i in node.inputs:
        if not i:
            inputs.append("")
        elif i in rw.graph.constants:
            packed = _blocked_constant(rw.graph.constants[i], out.shape[1], block)
            if packed is None:
                return False
            inputs.append(i if packed is rw.graph.constants[i] else rw.add_constant(f"{i}_ncdhw{block}c", packed))
        elif rw.graph.type_of(i).shape == out.shape:
            inputs.append(i)  # made blocked below, once every operand is known to fit
        else:
            return False
    inputs = [rw.as_blocked(i, block) if i and i not in rw.constants else i for i in inputs]
    rw.emit_blocked(node, node.op, inputs, node.attrs, block)
    return True


@register_pass("alter_layout_3d")
def alter_layout_3d(graph: Graph, *, lanes: int) -> Graph:
    """3-D conv regions in NCDHW[x]c blocks of up to `lanes` channels (the target's float lanes: its Backend
    binds them)."""
    if not any(n.op == "ConvND" and conv_nd_blocks(n, graph, lanes) for n in graph.nodes):
        return graph  # no region to start: every other graph comes out as it went in
    return rewrite_regions(graph, _Rewriter(graph, lanes), Fact.LAYOUT_3D)
