"""Folds constant Mul/Add/Sub/Div that follow a Conv or MatMul into its weights and bias: what an
imported inference BatchNormalization (Mul + Add per channel) and Gemm's alpha become."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

import numpy as np

from core.graph.ir import Graph, Node, TensorType
from core.graph.op_facts import Fact, op_rule, own_rule

from .registry import register_pass
from .rewrite import fresh_name, use_counts


@dataclass(frozen=True)
class Affine:
    """`value * scale` (kind "scale") or `value + shift` (kind "shift") with a constant operand."""

    kind: str
    value: str
    constant: np.ndarray


def _as_affine(node: Node, constants: Mapping[str, np.ndarray]) -> Optional[Affine]:
    if node.op not in _AFFINE or len(node.inputs) != 2:
        return None
    a, b = node.inputs
    if b in constants and a not in constants:
        value, c = a, constants[b]
    elif a in constants and b not in constants and node.op in ("Mul", "Add"):  # commutative only
        value, c = b, constants[a]
    else:
        return None
    if c.dtype.kind != "f":
        return None
    kind, convert = _AFFINE[node.op]
    with np.errstate(all="ignore"):
        c = convert(c.astype(np.float64))
    return Affine(kind, value, c) if np.all(np.isfinite(c)) else None


_AFFINE: dict[str, tuple[str, Callable[[np.ndarray], np.ndarray]]] = {
    "Mul": ("scale", lambda c: c),
    "Div": ("scale", lambda c: 1.0 / c),
    "Add": ("shift", lambda c: c),
    "Sub": ("shift", lambda c: -c),
}


def _along(c: np.ndarray, rank: int, axis: int, size: int) -> Optional[np.ndarray]:
    """c as a vector over `axis` of a rank-`rank` result, if it is constant along every other axis."""
    if c.ndim > rank:
        return None
    shape = (1,) * (rank - c.ndim) + c.shape
    if any(d != 1 for k, d in enumerate(shape) if k != axis) or shape[axis] not in (1, size):
        return None
    return np.broadcast_to(c.reshape(-1) if c.size > 1 else c.reshape(1), (size,))


@dataclass(frozen=True)
class Folded:
    node: Node  # the anchor rewritten to produce the affine node's output directly
    constants: dict


FoldFn = Callable[[Node, Affine, Graph, Mapping[str, np.ndarray]], Optional[Folded]]  # a Fact.FOLD_SCALE_BIAS rule


def _new_constant(base: str, value: np.ndarray, taken: set[str], out: dict) -> str:
    name = fresh_name(base, taken)
    taken.add(name)
    value = np.ascontiguousarray(value)
    value.flags.writeable = False
    out[name] = value
    return name


@op_rule(Fact.FOLD_SCALE_BIAS, "Conv", "ConvND")
def _fold_into_conv(conv: Node, affine: Affine, graph: Graph, constants: Mapping[str, np.ndarray]) -> Optional[Folded]:
    if conv.inputs[1] not in constants or (len(conv.inputs) > 2 and conv.inputs[2] and conv.inputs[2] not in constants):
        return None
    out_type = graph.type_of(conv.outputs[0])
    channels = out_type.shape[1]
    vec = _along(affine.constant, out_type.rank, 1, channels)
    if vec is None:
        return None
    dtype = np.dtype(out_type.dtype)
    weights = constants[conv.inputs[1]].astype(np.float64)
    has_bias = len(conv.inputs) > 2 and bool(conv.inputs[2])
    bias = constants[conv.inputs[2]].astype(np.float64) if has_bias else np.zeros(channels)
    if affine.kind == "scale":
        weights = weights * vec.reshape((-1,) + (1,) * (weights.ndim - 1))
        bias = bias * vec
    else:
        bias = bias + vec
    taken = set(graph.types)
    new: dict = {}
    inputs = list(conv.inputs[:2]) + [conv.inputs[2] if has_bias else ""]
    if affine.kind == "scale":
        inputs[1] = _new_constant(f"{conv.inputs[1]}_scaled", weights.astype(dtype), taken, new)
    if affine.kind == "scale" and not has_bias:
        inputs = inputs[:2]  # a scaled zero bias stays absent
    else:
        inputs[2] = _new_constant(f"{conv.inputs[1]}_bias", bias.astype(dtype), taken, new)
    return Folded(dataclasses.replace(conv, inputs=tuple(inputs)), new)


@op_rule(Fact.FOLD_SCALE_BIAS, "MatMul")
def _fold_into_matmul(matmul: Node, affine: Affine, graph: Graph,
                      constants: Mapping[str, np.ndarray]) -> Optional[Folded]:
    """A per-column scale folds into a constant right operand; a shift stays (it is the fused epilogue)."""
    b = matmul.inputs[1]
    if affine.kind != "scale" or b not in constants or constants[b].ndim != 2:
        return None
    out_type = graph.type_of(matmul.outputs[0])
    vec = _along(affine.constant, out_type.rank, out_type.rank - 1, out_type.shape[-1])
    if vec is None:
        return None
    scaled = (constants[b].astype(np.float64) * vec.reshape(1, -1)).astype(out_type.dtype)
    new: dict = {}
    name = _new_constant(f"{b}_scaled", scaled, set(graph.types), new)
    return Folded(dataclasses.replace(matmul, inputs=(matmul.inputs[0], name)), new)


@register_pass("fold_scale_bias")
def fold_scale_bias(graph: Graph) -> Graph:
    """One sweep; chains (Conv -> Mul -> Add -> Mul) fold step by step because each folded anchor
    takes over the affine node's output name and place."""
    constants = dict(graph.constants)
    types = dict(graph.types)
    uses = use_counts(graph)
    nodes: list[Node] = []
    position: dict[str, int] = {}  # value -> index in `nodes` of the node producing it
    for node in graph.nodes:
        affine = _as_affine(node, constants)
        anchor_at = position.get(affine.value) if affine else None
        anchor = nodes[anchor_at] if anchor_at is not None else None
        fold = own_rule(anchor.op, Fact.FOLD_SCALE_BIAS) if anchor is not None else None
        if fold is not None and uses.get(affine.value, 0) == 1 and len(anchor.outputs) == 1 \
                and types[node.outputs[0]] == types[affine.value]:
            folded = fold(anchor, affine, graph.replace(types=types), constants)
            if folded is not None:
                constants.update(folded.constants)
                types.update({k: TensorType(v.shape, v.dtype.name) for k, v in folded.constants.items()})
                node = dataclasses.replace(folded.node, outputs=node.outputs)
                # The anchor keeps its place: the affine node's output is now produced there.
                nodes[anchor_at] = node
                position[node.outputs[0]] = anchor_at
                continue
        position.update((o, len(nodes)) for o in node.outputs)
        nodes.append(node)
    return graph.replace(nodes=tuple(nodes), constants=constants, types=types)

