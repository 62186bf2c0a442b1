"""Whether zero-padding an input axis is harmless: every op that reads it treats its positions independently.

Seeds are input axes (one shape variable, e.g. the batch); each node maps the carried axes of its inputs
to axes of its outputs, or refuses (a reduction, contraction, softmax, concat or slice along the axis, an
op without a rule). When no node refuses, output position i depends only on input position i along the
carried axes, so rows past the actual size may hold anything and are sliced off. Conservative: an op
without a rule here is a refusal, never a guess.
"""
from __future__ import annotations

from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from .ir import Graph, Node
from .op_facts import Fact, decline, elementwise_rule, op_rule, op_rules, own_rule, rule_for


class NotPaddable(Exception):
    """Why an axis cannot be padded (names the op)."""


Carried = Sequence[frozenset[int]]  # per node input, its carried axes
Rule = Callable[[Node, Graph, Carried], list[frozenset[int]]]  # per node output, its carried axes
# A merged axis (Flatten of [batch, seq] into [batch*seq]) carries the rows as blocks: (axis, block) says
# position p of that axis belongs to row p // block; block 1 is the plain axis. Only the Fact.PADDING_MERGED
# rules see blocks; every other op refuses a merged axis.
Blocks = Sequence[frozenset[tuple[int, int]]]


def _shape(graph: Graph, value: str) -> tuple[int, ...]:
    return tuple(graph.type_of(value).shape)


def _broadcast(node: Node, graph: Graph, carried: Carried) -> list[frozenset[int]]:
    out_rank = len(_shape(graph, node.outputs[0]))
    axes = set()
    for value, mine in zip(node.inputs, carried):
        if value:
            axes |= {a + out_rank - len(_shape(graph, value)) for a in mine}
    return [frozenset(axes)] * len(node.outputs)


def _first_input_only(allowed: Callable[[Node, int, int], bool]) -> Rule:
    """Ops whose data input 0 may carry axes `allowed(node, axis, rank)` (same axis out); other inputs none."""

    def rule(node: Node, graph: Graph, carried: Carried) -> list[frozenset[int]]:
        if any(carried[1:]):
            raise NotPaddable(f"{node.op} {node.name!r} reads the padded axis in a parameter input")
        rank = len(_shape(graph, node.inputs[0]))
        bad = [a for a in carried[0] if not allowed(node, a, rank)]
        if bad:
            raise NotPaddable(f"{node.op} {node.name!r} mixes positions along axis {bad[0]}")
        return [frozenset(carried[0])] * len(node.outputs)
    return rule


def _matmul(node: Node, graph: Graph, carried: Carried) -> list[frozenset[int]]:
    ra, rb = len(_shape(graph, node.inputs[0])), len(_shape(graph, node.inputs[1]))
    rank = len(_shape(graph, node.outputs[0]))
    if ra < 2 or rb < 2:
        raise NotPaddable(f"MatMul {node.name!r} with a vector operand")
    out = set()
    for a in carried[0]:
        if a == ra - 1:
            raise NotPaddable(f"MatMul {node.name!r} sums over the padded axis")
        out.add(rank - 2 if a == ra - 2 else a + rank - ra)
    for b in carried[1]:
        if b == rb - 2:
            raise NotPaddable(f"MatMul {node.name!r} sums over the padded axis")
        out.add(rank - 1 if b == rb - 1 else b + rank - rb)
    return [frozenset(out)]


@op_rule(Fact.PADDING_MERGED, "MatMul")
def _matmul_blocks(node: Node, graph: Graph, carried: Blocks) -> list[frozenset[tuple[int, int]]]:
    """MatMul with the rows of its first operand merged from several axes ([batch*seq, hidden] x weights): each
    row is its own dot products, so the blocks carry over to the output's rows."""
    if any(b != 1 for _, b in carried[1]):
        raise NotPaddable(f"MatMul {node.name!r} reads the padded axis merged with others in its second operand")
    ra = len(_shape(graph, node.inputs[0]))
    if any(b != 1 and a == ra - 1 for a, b in carried[0]):
        raise NotPaddable(f"MatMul {node.name!r} sums over the padded axis")
    blocks = {a: b for a, b in carried[0]}
    plain = [frozenset(a for a, _ in pairs) for pairs in carried]
    rank = len(_shape(graph, node.outputs[0]))
    (axes,) = _matmul(node, graph, plain)
    from_first = {(rank - 2 if a == ra - 2 else a + rank - ra): b for a, b in blocks.items()}
    return [frozenset((a, from_first.get(a, 1)) for a in axes)]


def _reduce(node: Node, graph: Graph, carried: Carried) -> list[frozenset[int]]:
    if any(carried[1:]):
        raise NotPaddable(f"{node.op} {node.name!r} reads the padded axis in a parameter input")
    rank = len(_shape(graph, node.inputs[0]))
    if "axis" in node.attrs:  # ArgMax/ArgMin
        reduced = {int(node.attr("axis")) % rank}
    else:
        axes = node.attr("axes")
        reduced = set(range(rank)) if not axes else {int(a) % rank for a in axes}
    if carried[0] & reduced:
        raise NotPaddable(f"{node.op} {node.name!r} reduces over the padded axis")
    keep = bool(node.attrs.get("keepdims", 1))
    return [frozenset(a if keep else a - sum(r < a for r in reduced) for a in carried[0])]


def _axis_attr_not(name: str = "axis") -> Callable[[Node, int, int], bool]:
    return lambda node, axis, rank: axis != int(node.attr(name)) % rank


def _transpose(node: Node, graph: Graph, carried: Carried) -> list[frozenset[int]]:
    perm = list(node.attr("perm"))
    return [frozenset(perm.index(a) for a in carried[0])]


def _product(dims) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


@op_rule(Fact.PADDING_MERGED, "Reshape")
def _reshape(node: Node, graph: Graph, carried: Blocks) -> list[frozenset[tuple[int, int]]]:
    """The rows stay an outer factor when the dims before the axis multiply to the dims before its new place
    and each row spans whole positions of the new axis (row r: elements [r*b*inner, (r+1)*b*inner))."""
    if any(carried[1:]):
        raise NotPaddable(f"{node.op} {node.name!r} takes its shape from padded data")
    src, dst = _shape(graph, node.inputs[0]), _shape(graph, node.outputs[0])
    out = set()
    for a, block in carried[0]:
        prefix, rows, row_elems = _product(src[:a]), src[a] // block, block * _product(src[a + 1:])
        found = None
        for j in range(len(dst)):
            inner = _product(dst[j + 1:])
            if _product(dst[:j]) == prefix and row_elems % inner == 0 and dst[j] == rows * (row_elems // inner):
                found = (j, row_elems // inner)
                break
        if found is None:
            raise NotPaddable(f"{node.op} {node.name!r} merges the padded axis with others")
        out.add(found)
    return [frozenset(out)]


def _concat(node: Node, graph: Graph, carried: Carried) -> list[frozenset[int]]:
    axis = int(node.attr("axis")) % len(_shape(graph, node.outputs[0]))
    axes = frozenset().union(*carried)
    if axis in axes:
        raise NotPaddable(f"Concat {node.name!r} joins along the padded axis")
    return [axes]


def _slice(node: Node, graph: Graph, carried: Carried) -> list[frozenset[int]]:
    src, dst = _shape(graph, node.inputs[0]), _shape(graph, node.outputs[0])
    starts = node.attrs.get("starts") or (0,) * len(src)
    steps = node.attrs.get("steps") or (1,) * len(src)
    for a in carried[0]:
        if len(src) != len(dst) or starts[a] != 0 or steps[a] != 1 or src[a] != dst[a]:
            raise NotPaddable(f"{node.op} {node.name!r} slices the padded axis")
    return [frozenset(carried[0])] * len(node.outputs)


@op_rule(Fact.PADDING_MERGED, "Gather")
def _gather(node: Node, graph: Graph, carried: Blocks) -> list[frozenset[tuple[int, int]]]:
    rank = len(_shape(graph, node.inputs[0]))
    axis = int(node.attrs.get("axis", 0)) % rank
    index_rank = len(_shape(graph, node.inputs[1]))
    out = {(a if a < axis else a + index_rank - 1, b) for a, b in carried[0] if a != axis}
    for a, block in carried[0]:
        if a == axis:  # gathered rows: constant indices that keep every row in its own place
            out.add((axis + _rows_axis(node, graph, block), 1))
    if any(b != 1 for _, b in carried[1]):
        raise NotPaddable(f"Gather {node.name!r} indexes with a merged padded axis")
    out |= {(axis + k, 1) for k, _ in carried[1]}
    return [frozenset(out)]


def _rows_axis(node: Node, graph: Graph, block: int) -> int:
    """The axis m of Gather's constant indices along which index // block is the position itself (row i
    reads only row i); NotPaddable when there is none."""
    indices = graph.constants.get(node.inputs[1])
    if indices is None:
        raise NotPaddable(f"Gather {node.name!r} indexes along the padded axis with computed indices")
    rows = np.asarray(indices, dtype=np.int64) // block
    for m in range(rows.ndim):
        position = np.arange(rows.shape[m]).reshape([-1 if k == m else 1 for k in range(rows.ndim)])
        if rows.shape[m] > 1 and np.array_equal(rows, np.broadcast_to(position, rows.shape)):
            return m
    raise NotPaddable(f"Gather {node.name!r} indexes along the padded axis across rows")


def _batch_only(node: Node, axis: int, rank: int) -> bool:
    return axis == 0


def _if(node: Node, graph: Graph, carried: Carried) -> list[frozenset[int]]:
    """Each branch, a graph of its own, carries the padded axes to the same output axes; the condition and the
    outputs whose shape differs between the branches (their shape comes from the run) may not carry them, but for
    one whose length along one axis does (a bounded value): along its other axes."""
    if carried[0]:
        raise NotPaddable(f"If {node.name!r} branches on the padded axis")
    outs, values = None, len(node.outputs) - len(node.attr("shaped", ())) - len(node.attr("paired", ()))
    for branch, inputs_of in zip(node.attr("branches"), node.attr("inputs_of")):
        if branch is None:
            raise NotPaddable(f"If {node.name!r} has a branch that does not compile at these shapes")
        axes = padded_output_axes(branch, {v: carried[i] for v, i in zip(branch.inputs, inputs_of) if carried[i]})
        mine = [axes[o] for o in branch.outputs[:values]]
        if outs is not None and mine != outs:
            raise NotPaddable(f"If {node.name!r}: its branches carry the padded axis to different outputs")
        outs = mine
    if any(outs[k] for k in node.attr("shaped", ())) or any(a in outs[j] for j, a, _ in node.attr("paired", ())):
        raise NotPaddable(f"If {node.name!r}: an output whose shape differs between its branches carries the "
                          f"padded axis, or its run-time length runs along it")
    return outs + [frozenset()] * (len(node.outputs) - len(outs))


def _loop(node: Node, graph: Graph, carried: Carried) -> list[frozenset[int]]:
    """The body, a graph of its own, keeps the padded axes of its carried values in place (found by iterating to a
    fixed point: an axis a carried value takes up stays) and off its condition; a scan output carries them one
    axis further out (axis 0 counts iterations). Not the trip count or condition, nor values that grow."""
    if carried[0] or carried[1]:
        raise NotPaddable(f"Loop {node.name!r} reads the padded axis in its trip count or condition")
    if node.attr("growing"):
        raise NotPaddable(f"Loop {node.name!r} grows a carried value each iteration")
    body, count = node.attr("body"), node.attr("carried")
    state, captured = list(carried[2:2 + count]), dict(zip(body.inputs[2 + count:], carried[2 + count:]))
    for _ in range(count + 1):  # each pass adds an axis to a carried value, or ends
        seeds = {**{v: a for v, a in zip(body.inputs[2:2 + count], state)}, **captured}
        axes = padded_output_axes(body, {v: a for v, a in seeds.items() if a})
        outs = [axes[o] for o in body.outputs]
        if outs[0]:
            raise NotPaddable(f"Loop {node.name!r}: its condition reads the padded axis")
        grown = [s | o for s, o in zip(state, outs[1:1 + count])]
        if grown == state:
            break
        state = grown
    scans = [frozenset(a + 1 for a in o) for o in outs[1 + count:]]
    return state + scans + [frozenset()] * (len(node.outputs) - len(state) - len(scans))


_RULES: dict[str, Rule] = {
    "If": _if, "Loop": _loop, "MatMul": _matmul, "Transpose": _transpose, "Concat": _concat, "Slice": _slice,
    "Expand": _broadcast, "Where": _broadcast,
    "Softmax": _first_input_only(_axis_attr_not()), "LogSoftmax": _first_input_only(_axis_attr_not()),
    "LayerNormalization": _first_input_only(lambda node, a, rank: a < int(node.attr("axis")) % rank),
    **{op: _first_input_only(_batch_only) for op in (
        "Conv", "ConvND", "MaxPool", "AveragePool", "PoolND", "GlobalAveragePool", "GlobalMaxPool", "Interpolate")},
    **{op: _reduce for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ArgMax", "ArgMin")},
}
op_rules(Fact.PADDING, _RULES)
decline(Fact.PADDING_MERGED, *(op for op in _RULES if op != "MatMul"), why="lifts padding")  # _block_rule: their plain rule, refusing merged axes


@elementwise_rule(Fact.PADDING_MERGED)
def _broadcast_blocks(node: Node, graph: Graph, carried: Blocks) -> list[frozenset[tuple[int, int]]]:
    out_rank = len(_shape(graph, node.outputs[0]))
    pairs = {(a + out_rank - len(_shape(graph, v)), b) for v, mine in zip(node.inputs, carried) if v for a, b in mine}
    return [frozenset(pairs)] * len(node.outputs)


def _block_rule(op: str):
    """The rule of `op` over (axis, block) pairs: its own when it handles merged axes, else its plain rule
    lifted (refusing merged axes), else the elementwise one."""
    merged = rule_for(op, Fact.PADDING_MERGED)
    rule = own_rule(op, Fact.PADDING)
    if merged is not None or rule is None:
        return merged

    def plain(node: Node, graph: Graph, carried: Blocks) -> list[frozenset[tuple[int, int]]]:
        if any(b != 1 for pairs in carried for _, b in pairs):
            raise NotPaddable(f"{node.op} {node.name!r} reads the padded axis merged with others")
        outs = rule(node, graph, [frozenset(a for a, _ in pairs) for pairs in carried])
        return [frozenset((a, 1) for a in axes) for axes in outs]
    return plain


def _carried(graph: Graph, seeds: Mapping[str, frozenset[int]], refusing: Optional[list[Node]] = None
             ) -> dict[str, frozenset[tuple[int, int]]]:
    """Per value, the (axis, block) pairs that carry the seeded input axes; raises NotPaddable, or with `refusing`
    appends the node there and carries nothing through it."""
    carried: dict[str, frozenset[tuple[int, int]]] = {v: frozenset((a, 1) for a in axes)
                                                      for v, axes in seeds.items() if axes}
    for node in graph.nodes:
        ins = [carried.get(v, frozenset()) if v else frozenset() for v in node.inputs]
        if not any(ins):
            continue
        try:
            rule = _block_rule(node.op)
            if rule is None:
                raise NotPaddable(f"{node.op} {node.name!r} has no padding rule")
            outs = rule(node, graph, ins)
        except NotPaddable:
            if refusing is None:
                raise
            refusing.append(node)
            continue
        for value, pairs in zip(node.outputs, outs):
            if pairs:
                carried[value] = pairs
    return carried


def padded_output_axes(graph: Graph, seeds: Mapping[str, frozenset[int]]) -> dict[str, frozenset[int]]:
    """Per graph output, the axes that carry the seeded input axes (graph inputs -> axes); raises NotPaddable."""
    carried = _carried(graph, seeds)
    merged = [o for o in graph.outputs if any(b != 1 for _, b in carried.get(o, ()))]
    if merged:
        raise NotPaddable(f"output {merged[0]!r} holds the padded axis merged with others")
    return {o: frozenset(a for a, _ in carried.get(o, ())) for o in graph.outputs}


def padded_value_axes(graph: Graph, seeds: Mapping[str, frozenset[int]]) -> dict[str, frozenset[int]]:
    """Per value carrying the seeded input axes whose positions past the actual size reach only positions past it
    (no op that mixes positions reads it, nor what it flows into), those of its axes that carry them whole (not
    merged with others). An op that mixes positions (a gather through computed indices) makes its inputs, and what
    flows into them, absent."""
    refusing: list[Node] = []
    carried = _carried(graph, seeds, refusing)
    unsafe = {v for node in refusing for v in node.inputs if v}
    for node in reversed(graph.nodes):  # what flows into an unsafe value is unsafe too
        if any(o in unsafe for o in node.outputs if o in carried):
            unsafe.update(v for v in node.inputs if v in carried)
    return {v: axes for v, pairs in carried.items()
            if v not in unsafe and (axes := frozenset(a for a, b in pairs if b == 1))}


__all__ = ["NotPaddable", "padded_output_axes", "padded_value_axes"]
