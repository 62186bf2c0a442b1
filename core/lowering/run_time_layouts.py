"""Graph inputs and outputs laid out at their run-time lengths: the caller's own arrays, no padded copies."""
from __future__ import annotations

from typing import Collection, Mapping, Sequence

from ..graph.ir import Graph
from ..graph.length_inputs import LENGTH_SUM, length_input_name
from ..graph.op_defs.control_flow import CONTROL_FLOW_OPS
from ..graph.ops import Pattern, get_op

# A ranged artifact runs a size between its buckets in the smallest bucket that holds it. An input whose masked
# axis is shorter than the bucket's (a KV cache, `past_key_values.N.key` at past 40 in the bucket of past 64), and
# an output cut to its run-time length (`present.N.key`), used to be copied into and out of a buffer at the bucket's
# shape at every call (core/runtime/kiln_shaped.c). Laid out at their run-time lengths instead, their kernels
# address them with strides computed from the length inputs (core/te/run_time_layouts.py: a read past a length
# gives 0, as the zeroed copy did; a store past it is skipped), so the runtime hands the caller's pointers straight to
# the kernels. The copy stays where the caller's array is not that layout (another padded dim: batch 3 in a bucket
# of 4, then the copy is laid out at the run-time lengths too), for a masked dim with a constant in its size (past
# + 1) and where a kernel cannot take the layout: an output a reduction or contraction writes (a decoder's logits),
# an epilogue, a store whose laid-out axis is a vector loop's, a tensorized or hand-built nest, an If/Loop call, a
# device (non-host) target. Those values keep the bucket's layout (usable_layouts drops the predictable ones up
# front, build_executable the others when a kernel refuses, and lowers again).


def planned_layouts(plan, outputs: Mapping[str, Mapping[int, tuple[Mapping[str, int], int]]]
                    ) -> dict[str, tuple[tuple[int, str], ...]]:
    """Value -> ((axis, length), ...): each model input dim that is a masked variable or a sum of them (`plan`, a
    BucketPlan with `masked` set), and each output dim cut to such a sum (`outputs`: MaskedBuckets.outputs), laid
    out at that sum of length inputs (joined by LENGTH_SUM). Every bucket's graph takes every length input, a full
    one (its bucket at the variable's smallest size) too, so one length serves all buckets; kiln_shaped.c gives
    the same dims the actual sizes (its in_layout / out_layout tables)."""
    masked = {k: length_input_name(v.name) for k, v in enumerate(plan.variables) if v.name in plan.masked}
    by_name = {v.name: k for k, v in enumerate(plan.variables)}
    layouts: dict[str, list] = {}
    for name, dims in plan.base.items():
        for axis, fixed in enumerate(dims):
            variables, constant = plan.terms_of(name, axis)
            if fixed is None and variables and not constant and all(v in masked for v in variables) \
                    and len(set(variables)) == len(variables):
                layouts.setdefault(name, []).append((axis, LENGTH_SUM.join(masked[v] for v in variables)))
    for name, axes in outputs.items():
        for axis, (coefs, constant) in sorted(axes.items()):
            if coefs and not constant and all(c == 1 and by_name.get(v) in masked for v, c in coefs.items()):
                layouts.setdefault(name, []).append((axis, LENGTH_SUM.join(masked[by_name[v]] for v in coefs)))
    return {name: tuple(axes) for name, axes in layouts.items()}


def with_run_time_layouts(graph: Graph, layouts: Mapping[str, tuple[tuple[int, str], ...]]) -> Graph:
    """`graph` (a bucket of a ranged compile) with its inputs and outputs of `layouts` (planned_layouts')."""
    values = set(graph.inputs) | set(graph.outputs)
    return graph.replace(run_time_layouts={v: axes for v, axes in layouts.items() if v in values})


def usable_layouts(graph: Graph, backend, kernels: Sequence[tuple[Sequence, Sequence[str]]]) -> Graph:
    """`graph` without the run-time layouts none of its `kernels` ((nodes, outputs) each) can take: none for code for a
    device (its runtime pads on the device) or a graph with If/Loop calls (their branches address their arguments
    statically), and no output a reduction or a contraction writes (it accumulates in it; lowering would refuse)."""
    if not graph.run_time_layouts:
        return graph
    if not getattr(backend, "host_code", False) or any(n.op in CONTROL_FLOW_OPS for n in graph.nodes):
        return without_layouts(graph, graph.run_time_layouts)
    accumulated = [o for nodes, outputs in kernels
                   if max(get_op(n.op).pattern for n in nodes) >= Pattern.REDUCTION for o in outputs]
    return without_layouts(graph, accumulated)


def without_layouts(graph: Graph, values: Collection[str]) -> Graph:
    return graph.replace(run_time_layouts={v: a for v, a in graph.run_time_layouts.items() if v not in values})


def layout_table(layouts: Sequence[Mapping[str, tuple]], names: Sequence[str], ranks: Sequence[int]) -> tuple[int, ...]:
    """Per bucket (its executable's run_time_layouts), per value of `names`, per dim: 1 where the kernels address it
    at its run-time length (kiln_shaped.c's in_layout / out_layout), else 0."""
    table = []
    for bucket in layouts:
        for name, rank in zip(names, ranks):
            axes = {axis for axis, _ in bucket.get(name, ())}
            table += [int(d in axes) for d in range(rank)]
    return tuple(table)


__all__ = ["planned_layouts", "with_run_time_layouts", "usable_layouts", "without_layouts", "layout_table"]
