"""Weights stored at half size: a float32 constant that is exactly a float16 (bfloat16), or rounded to it under a
half precision, is kept in that dtype and the kernel reading it widens each loaded vector (F16C `vcvtph2ps` on x86)."""
from __future__ import annotations

from typing import Iterable, Optional

import numpy as np

from core.graph.ir import Graph, Node, TensorType

from .registry import register_pass
from .rewrite import fresh_name

# Below this a constant's bytes do not matter and a conversion would only add work (biases, scalars, shapes).
MIN_ELEMENTS = 1024
STORAGE_DTYPES = ("float16", "bfloat16")


def exact_storage(values: np.ndarray, dtypes: Iterable[str]) -> Optional[str]:
    """The first of `dtypes` that holds every value of a float32 array exactly (NaN included); else None."""
    import ml_dtypes

    for dtype in dtypes:
        with np.errstate(over="ignore"):  # too large for float16: inf, which then differs
            narrow = values.astype(np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.float16)
        if np.array_equal(narrow.astype(np.float32), values, equal_nan=True):
            return dtype
    return None


@register_pass("narrow_weight_storage")
def narrow_weight_storage(graph: Graph, dtypes: tuple[str, ...] = STORAGE_DTYPES, round_to: Optional[str] = None) -> Graph:
    """Each kernel (node or Fused body) reading such a constant reads its narrow copy through a Cast to float32
    at the top of its body; the float32 constant goes when nothing else reads it. `dtypes`: the storage types the
    target converts cheaply, in order of preference (the Backend says which); `round_to`: one of them that every
    float32 weight is rounded to (a half-precision compile: packed and Winograd-transformed weights too)."""
    if round_to is not None and round_to not in dtypes:
        raise ValueError(f"round_to={round_to!r} is not one of the storage dtypes {dtypes}")
    if not dtypes:
        return graph
    types, constants = dict(graph.types), dict(graph.constants)
    narrow_of: dict[str, Optional[str]] = {}  # float32 constant -> its narrow copy (None: keep float32)

    def narrow_copy(value: str) -> Optional[str]:
        if value not in narrow_of:
            data = constants.get(value)
            storage = None
            if data is not None and types[value].dtype == "float32" and data.size >= MIN_ELEMENTS:
                storage = round_to or exact_storage(np.asarray(data, np.float32), dtypes)
            if storage is None:
                narrow_of[value] = None
            else:
                name = fresh_name(f"{value}_{storage}", types)
                types[name] = TensorType(types[value].shape, storage)
                constants[name] = _as_dtype(np.asarray(data, np.float32), storage)
                narrow_of[value] = name
        return narrow_of[value]

    nodes, changed = [], False
    for node in graph.nodes:
        reads = {v: narrow_copy(v) for v in dict.fromkeys(node.inputs) if v in graph.constants}
        reads = {v: n for v, n in reads.items() if n is not None}
        if not reads:
            nodes.append(node)
            continue
        changed = True
        nodes.append(_reading_narrow(node, reads, graph, types))
    if not changed:
        return graph
    still_read = {v for n in nodes for v in n.inputs} | set(graph.outputs)
    for value in [v for v, n in narrow_of.items() if n is not None and v not in still_read]:
        del constants[value]
        del types[value]
    return graph.replace(nodes=tuple(nodes), types=types, constants=constants)


def _as_dtype(values: np.ndarray, dtype: str) -> np.ndarray:
    import ml_dtypes

    return values.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16)


def _reading_narrow(node: Node, reads: dict[str, str], graph: Graph, types: dict[str, TensorType]) -> Node:
    """`node` as a Fused kernel whose body first widens each narrow constant back to the float32 value it replaces."""
    body = node.attr("body") if node.op == "Fused" else None
    if body is None:
        body = Graph(tuple(dict.fromkeys(i for i in node.inputs if i)), tuple(node.outputs), (node,),
                     {v: graph.type_of(v) for v in (*node.inputs, *node.outputs) if v}, {}, name=f"{node.name or node.op}_narrow")
    body_types = dict(body.types)
    casts = []
    for wide, narrow in reads.items():
        body_types[narrow] = types[narrow]
        casts.append(Node("Cast", (narrow,), (wide,), {"to": "float32"}, name=f"{wide}_widen"))
    inputs = tuple(dict.fromkeys(reads.get(i, i) for i in body.inputs))
    new_body = body.replace(inputs=inputs, nodes=(*casts, *body.nodes), types=body_types)
    ops = (*(["Cast"] * len(casts)), *(node.attr("ops") or (node.op,)))
    pattern = node.attr("pattern")
    attrs = {"body": new_body, "ops": tuple(ops)}
    if pattern is None:
        from core.graph.ops import get_op

        pattern = int(get_op(node.op).pattern)
    attrs["pattern"] = int(pattern)
    return Node("Fused", tuple(dict.fromkeys(reads.get(i, i) for i in node.inputs)), tuple(node.outputs), attrs,
                name=node.name)
