"""Constant folding with each op's numpy `fold`; `fold_node` and `worth_folding` are shared with
GraphBuilder, which folds eagerly while importing."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from core.graph.ir import Graph, Node, TensorType
from core.graph.ops import get_op

from .registry import register_pass

# Folding must not blow up the weights: a node whose results are much larger than its constant
# inputs (Expand or Pad of a small constant) stays a node unless the results are small anyway.
FOLD_FLOOR_BYTES = 1 << 20
FOLD_GROWTH = 2


def worth_folding(inputs: Sequence[np.ndarray], output_types: Sequence[TensorType]) -> bool:
    produced = sum(t.nbytes for t in output_types)
    consumed = sum(a.nbytes for a in inputs if a is not None)
    return produced <= max(FOLD_FLOOR_BYTES, FOLD_GROWTH * consumed)


def fold_node(op: str, inputs: Sequence[np.ndarray | None], attrs: Mapping,
              output_types: Sequence[TensorType]) -> list[np.ndarray]:
    """Runs one op's numpy semantics and checks the results have exactly the inferred types."""
    definition = get_op(op)
    if definition.fold is None:
        raise NotImplementedError(f"op {op} has no fold function")
    results = [np.asarray(r) for r in definition.fold(list(inputs), attrs)]
    if len(results) != len(output_types):
        raise RuntimeError(f"{op}: fold returned {len(results)} results, type inference declared {len(output_types)}")
    for result, expected in zip(results, output_types):
        if result.shape != expected.shape or result.dtype.name != expected.dtype:
            raise RuntimeError(f"{op}: fold produced {result.dtype.name}{list(result.shape)}, "
                               f"type inference declared {expected}")
    return results


def _fresh(base: str, taken: Mapping[str, object]) -> str:
    name, counter = base, 0
    while name in taken:
        counter += 1
        name = f"{base}_{counter}"
    return name


@register_pass("fold_constants")
def fold_constants(graph: Graph) -> Graph:
    """Replaces all-constant nodes by constants; graph outputs stay produced by (Identity) nodes."""
    constants = dict(graph.constants)
    types = dict(graph.types)
    outputs = set(graph.outputs)
    nodes: list[Node] = []
    for node in graph.nodes:
        present = [i for i in node.inputs if i]
        foldable = present and all(i in constants for i in present) and get_op(node.op).fold is not None
        already_minimal = node.op == "Identity" and node.outputs[0] in outputs
        if not foldable or already_minimal:
            nodes.append(node)
            continue
        arrays = [constants[i] if i else None for i in node.inputs]
        out_types = [types[o] for o in node.outputs]
        if not worth_folding(arrays, out_types):
            nodes.append(node)
            continue
        for out, value in zip(node.outputs, fold_node(node.op, arrays, node.attrs, out_types)):
            value = np.ascontiguousarray(value)
            value.flags.writeable = False
            if out in outputs:
                holder = _fresh(f"{out}_folded", types)
                constants[holder] = value
                types[holder] = types[out]
                nodes.append(Node("Identity", (holder,), (out,), name=node.name))
            else:
                constants[out] = value
    return graph.replace(nodes=tuple(nodes), constants=constants, types=types)
