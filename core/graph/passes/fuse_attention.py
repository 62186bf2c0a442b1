"""Rewrites scaled dot-product attention as exported (MatMul(q, kt) [* or / a scalar] [+ bias] -> Softmax over the
keys [-> Where(IsNaN(p), 0, p)] -> MatMul(p, v)) into one SoftmaxAttention node, whose kernel never writes the
[.., M, N] scores; a constant bias that is exactly a causal mask becomes `causal=1` (the mask from positions)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from core.graph.ir import Graph, Node

from .registry import register_pass

MAX_KEYS = 8192  # the kernel keeps a few rows of N scores per thread on its stack
# Without a causal mask the fused kernel pays only when the scores of one head leave the caches: its products
# do not match the packed MatMul micro-kernel. Kernel timings, fused / MatMul+Softmax+MatMul (2 threads, medians of
# 9 interleaved rounds, loaded machine): heads of 1500x1500 keys (whisper) 0.46, 512x512 1.0-1.1, 197x197 (vit)
# 1.06-1.12, 64x2 windows of 49 (swin) 2.5-2.8; causal (masked chunks skipped) 128x128 0.47, 512x512 0.44.
MIN_SCORES = 1 << 20  # query x key scores per head, below which unmasked attention stays three kernels
MASKED = -1e30  # a bias at or below this hides its key (exporters write -inf or float32's lowest)


class _Match:
    def __init__(self, graph: Graph, min_scores: int):
        self.graph, self.min_scores = graph, min_scores
        self.producers = graph.producers()
        self.consumers = graph.consumers()
        self.outputs = set(graph.outputs)

    def only_consumer(self, value: str) -> Optional[Node]:
        users = self.consumers.get(value, [])
        return users[0] if len(users) == 1 and value not in self.outputs else None

    def scalar(self, value: str) -> Optional[float]:
        array = self.graph.constants.get(value)
        if array is None or np.asarray(array).size != 1:
            return None
        return float(np.asarray(array).reshape(()))

    def attention(self, softmax: Node) -> Optional[tuple[list[Node], Node]]:
        """(nodes replaced, the SoftmaxAttention node) for the chain around `softmax`, or None."""
        graph = self.graph
        scores_type = graph.type_of(softmax.inputs[0])
        if scores_type.dtype != "float32" or scores_type.rank < 3:
            return None
        if int(softmax.attr("axis", -1)) not in (-1, scores_type.rank - 1) or scores_type.shape[-1] > MAX_KEYS:
            return None
        nodes, attrs = [softmax], {"scale": 1.0, "causal": 0, "nan_to_zero": 0}
        consumer = self.only_consumer(softmax.outputs[0])
        probs = softmax.outputs[0]
        if consumer is None:  # PyTorch's guard: Where(IsNaN(p), 0, p)
            guard = self.nan_guard(softmax)
            if guard is None:
                return None
            nodes += guard
            probs = guard[-1].outputs[0]
            attrs["nan_to_zero"] = 1
            consumer = self.only_consumer(probs)
        if consumer is None or consumer.op != "MatMul" or consumer.inputs[0] != probs or consumer.attrs:
            return None
        v = consumer.inputs[1]
        nodes.append(consumer)
        value, bias = softmax.inputs[0], None
        node = self.producers.get(value)
        if node is not None and node.op == "Add" and self.only_consumer(value):
            s_side = next((k for k, x in enumerate(node.inputs) if (p := self.producers.get(x)) is not None
                           and p.op in ("MatMul", "Mul", "Div") and self.only_consumer(x)
                           and graph.type_of(x).shape == scores_type.shape), None)
            if s_side is None:
                return None
            bias, value = node.inputs[1 - s_side], node.inputs[s_side]
            nodes.append(node)
            node = self.producers.get(value)
        if node is not None and node.op in ("Mul", "Div") and self.only_consumer(value):
            factor = self.scalar(node.inputs[1])
            if factor is None or factor == 0.0:
                return None
            attrs["scale"] = factor if node.op == "Mul" else 1.0 / factor
            nodes.append(node)
            value = node.inputs[0]
            node = self.producers.get(value)
        if node is None or node.op != "MatMul" or node.attrs or not self.only_consumer(value):
            return None
        nodes.append(node)
        q, kt = node.inputs
        types = [graph.type_of(x) for x in (q, kt, v)]
        if any(t.dtype != "float32" for t in types) or len({t.shape[:-2] for t in types}) != 1:
            return None  # broadcast K/V heads (grouped queries) stay MatMuls
        if bias is not None and self.is_causal(bias, scores_type.shape):
            bias, attrs["causal"] = None, 1
        if not attrs["causal"] and scores_type.shape[-2] * scores_type.shape[-1] < self.min_scores:
            return None
        inputs = (q, kt, v) + ((bias,) if bias is not None else ())
        return nodes, Node("SoftmaxAttention", inputs, consumer.outputs, attrs, f"{softmax.name}_attention")

    def nan_guard(self, softmax: Node) -> Optional[list[Node]]:
        users = self.consumers.get(softmax.outputs[0], [])
        isnan = next((u for u in users if u.op == "IsNaN"), None)
        where = next((u for u in users if u.op == "Where"), None)
        if len(users) != 2 or isnan is None or where is None or self.only_consumer(isnan.outputs[0]) is not where:
            return None
        if where.inputs[0] != isnan.outputs[0] or where.inputs[2] != softmax.outputs[0]:
            return None
        if self.scalar(where.inputs[1]) != 0.0 or where.outputs[0] in self.outputs:
            return None
        if self.graph.type_of(where.outputs[0]).shape != self.graph.type_of(softmax.outputs[0]).shape:
            return None
        return [isnan, where]

    def is_causal(self, bias: str, scores: tuple[int, ...]) -> bool:
        """A constant bias, the same for every batch and head, 0 on and below the diagonal (the queries being
        the last rows of the keys) and masked above it."""
        array = self.graph.constants.get(bias)
        if array is None:
            return False
        array = np.asarray(array)
        m, n = scores[-2:]
        if array.ndim < 2 or array.shape[-2:] != (m, n) or any(d != 1 for d in array.shape[:-2]):
            return False
        plane = array.reshape(m, n)
        visible = np.arange(n)[None, :] <= np.arange(m)[:, None] + (n - m)
        return bool(np.all(plane[visible] == 0) and np.all(plane[~visible] <= MASKED))


@register_pass("fuse_attention")
def fuse_attention(graph: Graph, min_scores: int = MIN_SCORES) -> Graph:
    match = _Match(graph, min_scores)
    replaced: dict[int, Node] = {}  # id of the chain's last MatMul -> the fused node; the others dropped
    dropped: set[int] = set()
    for node in graph.nodes:
        if node.op != "Softmax":
            continue
        found = match.attention(node)
        if found is None:
            continue
        nodes, fused = found
        last = next(n for n in nodes if n.outputs == fused.outputs)
        replaced[id(last)] = fused
        dropped.update(id(n) for n in nodes if n is not last)
    if not replaced:
        return graph
    # The fused node takes the last MatMul's place: every input (q, kt, v, bias) is computed before it.
    nodes = [replaced.get(id(n), n) for n in graph.nodes if id(n) not in dropped]
    return graph.replace(nodes=tuple(nodes))
