"""What the tensor-core groups (gemm_group.py, conv_group.py) match around their anchor: the Casts into it and the
epilogue chain after it (Cast, bias or residual Add, Relu, Clip(0, 6), Sigmoid)."""
from __future__ import annotations

from typing import Callable, Optional, Sequence

from ....graph.ir import Graph, Node
from ....kernels.gemm_plan.gemm_mma import OPERAND_DTYPES

ACTIVATIONS = {"Relu": "relu", "Sigmoid": "sigmoid"}
RELU6 = {"min": 0.0, "max": 6.0}  # the one Clip the epilogue fuses (mobilenet's ReLU6), bounds as attributes


def static_shape(shape) -> bool:
    return all(isinstance(d, int) for d in shape)


def anchored(nodes: Sequence[Node], graph: Graph, outputs: Sequence[str],
             op: str) -> Optional[tuple[int, Node, str, dict[str, str]]]:
    """(its position, the group's `op` node, the weight it reads: the narrow value itself when a leading Cast
    widens it, widened operand -> its narrow value) when the group has one output, that op, and before it only
    widenings of its operands after A (the weight; a Conv's own bias, which a float16 model stores narrow too)."""
    if len(outputs) != 1:
        return None
    # A half-precision compile stores weights narrow, widened by a Cast at the top of the body: the kernel reads the
    # narrow weight itself (and rounds a float32 A to it as it copies).
    at = next((i for i, node in enumerate(nodes) if node.op == op), None)
    if at is None or any(node.op != "Cast" or graph.type_of(node.inputs[0]).dtype not in OPERAND_DTYPES
                         for node in nodes[:at]):
        return None
    anchor, widened = nodes[at], {node.outputs[0]: node.inputs[0] for node in nodes[:at]}
    if len(anchor.inputs) < 2 or set(widened) - set(anchor.inputs[1:]):  # a widening A or no operand uses
        return None
    return at, anchor, widened.get(anchor.inputs[1], anchor.inputs[1]), widened


def epilogue_chain(nodes: Sequence[Node], current: str, graph: Graph, produced: set,
                   is_bias: Callable[[tuple], bool], output_shape: tuple,
                   roles: Optional[dict] = None) -> Optional[tuple[str, tuple[str, ...], dict, dict]]:
    """(the chain's last value, its epilogue steps, role -> extra's dtype, role -> graph value) of `nodes`, a chain
    of Cast, Relu, Sigmoid and bias or residual Add each reading the one before, starting at `current`; None when
    the chain is anything else. An Add's other operand is a bias when `is_bias(its shape)`, a residual when it has
    `output_shape`; at most one of each (`roles` may bring one already, e.g. a convolution's own bias)."""
    roles, steps, dtypes = dict(roles or {}), [], {}
    dtype = graph.type_of(current).dtype
    for node in nodes:
        if current not in node.inputs or len(node.outputs) != 1:
            return None
        if node.op == "Cast":
            dtype = node.attr("to")
        elif node.op in ACTIVATIONS:
            steps.append(ACTIVATIONS[node.op])
        elif node.op == "Clip" and len(node.inputs) == 1 and all(node.attr(k) == v for k, v in RELU6.items()):
            steps.append("relu6")
        elif node.op == "Add" and len(node.inputs) == 2 and node.inputs[0] != node.inputs[1]:
            other = node.inputs[1] if node.inputs[0] == current else node.inputs[0]
            t = graph.type_of(other)
            if other in produced or t.dtype != dtype or not static_shape(t.shape):
                return None
            role = "bias" if is_bias(tuple(t.shape)) else "residual"
            if role in roles or (role == "residual" and tuple(t.shape) != tuple(output_shape)):
                return None
            roles[role] = other
            steps.append(role)
            dtypes[role] = t.dtype
        else:
            return None
        current = node.outputs[0]
    return current, tuple(steps), dtypes, roles


__all__ = ["ACTIVATIONS", "anchored", "epilogue_chain", "static_shape"]
