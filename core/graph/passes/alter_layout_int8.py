"""alter_layout's rules for 8-bit ops: packed ConvIntegers write channels-last blocks, depthwise ones and table
lookups read them."""
from __future__ import annotations

import numpy as np

from core.graph.ir import Graph, Node
from core.graph.op_defs.blocked import BLOCKED_VARIANTS
from core.graph.op_facts import Fact, op_rule
from core.graph.ops import Pattern, get_op

from .alter_layout import _Rewriter


def feeds_int8_conv(graph: Graph, value: str) -> bool:
    """Whether `value` reaches a packed or depthwise 8-bit conv through ops that stay blocked (elementwise, pools,
    Concat): only then does a packed conv's blocked output save more than the transform back to NCHW costs."""
    consumers: dict[str, list[Node]] = {}
    for node in graph.nodes:
        for i in node.inputs:
            consumers.setdefault(i, []).append(node)
    seen, frontier = {value}, [value]
    while frontier:
        for node in consumers.get(frontier.pop(), []):
            if node.inputs[0] in seen and (node.op == "ConvIntegerPacked" or (
                    node.op == "ConvInteger" and node.attr("group", 1) == graph.type_of(node.inputs[0]).shape[1])):
                return True
            passes = node.op == "Concat" or node.op in BLOCKED_VARIANTS or get_op(node.op).pattern <= Pattern.BROADCAST
            for out in node.outputs if passes else ():
                if out not in seen:
                    seen.add(out)
                    frontier.append(out)
    return False


@op_rule(Fact.LAYOUT, "ConvIntegerPacked")
def _packed_conv(rw: _Rewriter, node: Node) -> bool:
    """Its output as [n, 1, oh, ow, O]: each pixel's channels contiguous, as the `int8_dot` tile holds them (NCHW
    scattered every tile's stores across O planes), when it feeds another 8-bit conv. It reads blocked input of
    any block of whole groups of 4 channels (the dot's depth), NCHW otherwise."""
    x = node.inputs[0]
    if rw.block_of(x) is None and not feeds_int8_conv(rw.graph, node.outputs[0]):
        return False
    block = rw.block_of(x)
    blocked = block is not None and block % 4 == 0
    inputs = [rw.blocked[x][0] if blocked else rw.plain(x), *node.inputs[1:]]
    rw.emit_blocked(node, "ConvIntegerPackedNCHWc", inputs, dict(node.attrs, in_block=block if blocked else 0),
                    int(node.attrs["columns"]))
    return True


def _constant(rw: _Rewriter, node: Node, index: int):
    name = node.inputs[index] if len(node.inputs) > index else ""
    return np.zeros((), np.int32) if not name else rw.graph.constants.get(name)


@op_rule(Fact.LAYOUT, "ConvInteger")
def _depthwise_conv(rw: _Rewriter, node: Node) -> bool:
    """A depthwise ConvInteger whose input is blocked already (a packed conv's output) runs channels-last
    with its weights minus their zero points as int32 [kh, kw, C]; a lone one would pay two transforms."""
    x, w = node.inputs[0], node.inputs[1]
    xt, weights = rw.graph.type_of(x), rw.graph.constants.get(w)
    if weights is None or xt.rank != 4 or rw.block_of(x) is None:
        return False
    c = xt.shape[1]
    if node.attr("group", 1) != c or weights.shape[:2] != (c, 1):
        return False
    x_zero, w_zero = _constant(rw, node, 2), _constant(rw, node, 3)
    if x_zero is None or w_zero is None or x_zero.size != 1:
        return False
    shifted = weights.astype(np.int32) - np.asarray(w_zero, np.int32).reshape(-1, 1, 1, 1)
    inputs = [rw.as_blocked(x, c), rw.add_constant(f"{w}_taps", shifted[:, 0].transpose(1, 2, 0)),
              rw.add_constant(f"{x}_zero", np.asarray(x_zero, xt.dtype).reshape(()))]
    attrs = {k: node.attr(k) for k in ("strides", "pads", "dilations")}
    rw.emit_blocked(node, "DepthwiseConvIntegerNCHWc", inputs, attrs, c)
    return True


@op_rule(Fact.LAYOUT, "LookupTable")
def _lookup_table(rw: _Rewriter, node: Node) -> bool:
    """A table lookup is elementwise in its data alone: a blocked input stays blocked, the table as it is."""
    x, table = node.inputs
    block = rw.block_of(x)
    if block is None:
        return False
    rw.emit_blocked(node, "LookupTable", [rw.blocked[x][0], table], node.attrs, block)
    return True
