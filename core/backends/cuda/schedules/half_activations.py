"""Half-precision activations between tensor-core groups (cuda): a float32 value that one tensor-core group
(gemm_group.py / conv_group.py) produces and that only tensor-core groups read, each as its A operand of one
half dtype, is stored in that dtype instead: the producer's epilogue ends with a Cast to it and the readers take
it as it is. The readers rounded A to that dtype as they copied it anyway, so every result is the same, and the
activation moves in half the bytes (a float16 model stays float16 between its convs and GEMMs). Likewise a Cast
of a half value to float32 that only such groups read (as A, of that dtype) is skipped: they read the half value
itself, and the Cast kernel goes; and any other group ending in such a Cast (a float16 model's MaxPool before
resnet's first convs) ends in the half value instead."""
from __future__ import annotations

import dataclasses
from typing import Optional

from ....graph.ir import Graph, Node, TensorType
from ....graph.passes.eliminate_dead_code import eliminate_dead_code
from ....graph.passes.rewrite import fresh_name
from ....target import Target
from .conv_group import match_conv_group
from .gemm_group import match_gemm_group


def _matched(node: Node, graph: Graph) -> Optional[tuple]:
    """(problem, roles) when `node` is a Fused group the tensor-core kernel computes."""
    if node.op != "Fused":
        return None
    body, outputs = list(node.attr("body").nodes), list(node.outputs)
    return match_gemm_group(body, graph, outputs) or match_conv_group(body, graph, outputs)


def half_activations(graph: Graph, target: Target) -> Graph:
    if target.sm < 80:  # no tensor-core groups before sm_80
        return graph
    consumers, producers, changed = graph.consumers(), graph.producers(), False
    types, nodes = dict(graph.types), list(graph.nodes)
    index = {id(n): k for k, n in enumerate(nodes)}
    for value, readers in consumers.items():
        producer = producers.get(value)
        if producer is None or value in graph.outputs or types[value].dtype != "float32":
            continue
        found = [_matched(r, graph) for r in readers]
        if not found or any(f is None or f[1].get("a") != value or value in [v for role, v in f[1].items()
                                                                           if role != "a"] for f in found):
            continue
        halves = {f[0].dtype for f in found}
        if len(halves) != 1:
            continue
        half = halves.pop()
        current = [nodes[index[id(r)]] for r in readers]
        source = producer.inputs[0] if producer.op == "Cast" else None
        if source is not None and types[source].dtype == half and not any(source in r.inputs for r in readers):
            rewritten = [_reading(r, value, source, types[source]) for r in current]
            if all(_matched(n, graph.replace(types=types)) for n in rewritten):
                for old, new in zip(readers, rewritten):
                    nodes[index[id(old)]] = new
                changed = True
            continue
        if _matched(producer, graph) is None:
            ending = _ending_half(nodes[index[id(producer)]], value, half, types)
            if ending is not None:
                trial = graph.replace(types=types)
                rewritten = [ending] + [_retyped(r, value, types) for r in current]
                if all(_matched(n, trial) for n in rewritten[1:]):
                    for old, new in zip([producer, *readers], rewritten):
                        nodes[index[id(old)]] = new
                    changed = True
                else:
                    types[value] = graph.types[value]
            continue
        rewritten = _rewrite(nodes[index[id(producer)]], current, value, half, types)
        trial = graph.replace(types=types)
        if all(_matched(n, trial) for n in rewritten):
            for old, new in zip([producer, *readers], rewritten):
                nodes[index[id(old)]] = new
            changed = True
        else:
            types[value] = graph.types[value]
    return eliminate_dead_code(graph.replace(nodes=tuple(nodes), types=types)) if changed else graph


def _reading(reader: Node, value: str, source: str, source_type: TensorType) -> Node:
    """`reader` reading `source` wherever it read `value` (its inputs and its body's nodes)."""
    def swap(names):
        return tuple(source if v == value else v for v in names)

    body = reader.attr("body")
    nodes = tuple(dataclasses.replace(n, inputs=swap(n.inputs)) for n in body.nodes)
    types = {**{k: v for k, v in body.types.items() if k != value}, source: source_type}
    new_body = body.replace(inputs=swap(body.inputs), nodes=nodes, types=types)
    return dataclasses.replace(reader, inputs=swap(reader.inputs), attrs={**reader.attrs, "body": new_body})


def _rewrite(producer: Node, readers: list[Node], value: str, half: str, types: dict) -> list[Node]:
    """The producer ending in a Cast of `value` to `half` and the readers reading it so (`types` updated)."""
    inner = fresh_name(f"{value}_float32", types)
    types[inner] = types[value]
    types[value] = TensorType(types[inner].shape, half)
    body = producer.attr("body")
    last = [dataclasses.replace(n, outputs=tuple(inner if o == value else o for o in n.outputs)) for n in body.nodes]
    cast = Node("Cast", (inner,), (value,), {"to": half})
    new_body = body.replace(nodes=tuple(last) + (cast,), types={**body.types, inner: types[inner], value: types[value]})
    out = [dataclasses.replace(producer, attrs={**producer.attrs, "body": new_body,
                                                 "ops": tuple(producer.attr("ops")) + ("Cast",)})]
    return out + [_retyped(reader, value, types) for reader in readers]


def _retyped(reader: Node, value: str, types: dict) -> Node:
    """`reader` with its body's type of `value` as `types` has it now."""
    body = reader.attr("body")
    return dataclasses.replace(reader, attrs={**reader.attrs, "body": body.replace(types={**body.types, value: types[value]})})


def _ending_half(producer: Node, value: str, half: str, types: dict) -> Optional[Node]:
    """The Fused `producer` whose last node widens a `half` value to `value` made to end in that half value (its Cast
    to `half` itself: a copy; `types` updated), or None when it does not end so."""
    if producer.op != "Fused":
        return None
    body = producer.attr("body")
    last = body.nodes[-1]
    if last.op != "Cast" or last.outputs != (value,) or body.type_of(last.inputs[0]).dtype != half:
        return None
    types[value] = TensorType(types[value].shape, half)
    nodes = body.nodes[:-1] + (dataclasses.replace(last, attrs={**last.attrs, "to": half}),)
    new_body = body.replace(nodes=nodes, types={**body.types, value: types[value]})
    return dataclasses.replace(producer, attrs={**producer.attrs, "body": new_body})


__all__ = ["half_activations"]
