"""MatMuls whose operands are float16 values widened to float32 (a float16 model after widen_narrow_floats: a Cast of
a float16 value, or a float32 constant that is exactly a float16) read the float16 values themselves and accumulate
in float32 (`accumulate`): what a GPU's tensor cores compute (mma.sync f16 x f16 -> f32), the same products."""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from core.graph.ir import Graph, Node, TensorType

from .eliminate_dead_code import eliminate_dead_code
from .narrow_weight_storage import exact_storage
from .registry import register_pass
from .rewrite import fresh_name


@register_pass("half_matmul_operands")
def half_matmul_operands(graph: Graph) -> Graph:
    producers = graph.producers()
    types, constants = dict(graph.types), dict(graph.constants)
    nodes, changed = [], False
    for node in graph.nodes:
        halves = [_as_half(v, producers, types, constants) for v in node.inputs] if _plain_matmul(node, types) else []
        if not halves or None in halves:
            nodes.append(node)
            continue
        attrs = {**node.attrs, "accumulate": "float32"}
        nodes.append(dataclasses.replace(node, inputs=tuple(halves), attrs=attrs))
        changed = True
    if not changed:
        return graph
    return eliminate_dead_code(graph.replace(nodes=tuple(nodes), types=types, constants=constants))


def _plain_matmul(node: Node, types: dict) -> bool:
    return (node.op == "MatMul" and len(node.inputs) == 2 and node.attr("packed_columns") is None
            and node.attr("accumulate") is None and all(types[v].dtype == "float32" for v in node.inputs)
            and all(types[v].rank >= 2 for v in node.inputs))


def _as_half(value: str, producers: dict, types: dict, constants: dict) -> Optional[str]:
    """The float16 value `value` widens, or a float16 copy of it when it is a constant that is exactly one."""
    cast = producers.get(value)
    if cast is not None and cast.op == "Cast" and types[cast.inputs[0]].dtype == "float16":
        return cast.inputs[0]
    data = constants.get(value)
    if data is None or exact_storage(np.asarray(data, np.float32), ("float16",)) is None:
        return None
    name = fresh_name(f"{value}_float16", types)
    half = np.asarray(data, np.float32).astype(np.float16)
    half.flags.writeable = False
    constants[name], types[name] = half, TensorType(types[value].shape, "float16")
    return name
