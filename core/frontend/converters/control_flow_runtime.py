"""If and Loop run at run time: each branch, or the loop body, imported as a graph of its own and compiled once.

If: the entry reads the condition and runs only the taken branch. Branch outputs may differ in shape: when
they differ along one axis (a branch's own run-time length included), the output is a bounded value
(core/graph/bounded.py) at the larger size whose valid length the taken branch gives, so later ops read it as
they read NonZero's; otherwise (different ranks, several axes) it holds the taken branch's elements first and a
`NAME::shape` output gives its actual shape, so it must be a graph output. A branch that does not compile for
the compiled input shapes (silero VAD's branch for the other sample rate) fails only when it is taken.
Loop: the body runs while i < M and the condition holds, both read at run time; loop-carried values keep
their shape or grow along their outermost axis (a greedy decoder's tokens: compiled at the largest size, the
valid length a body input). Scan outputs and growing values get room for `trip_bound` iterations (M when it
is a constant, M's largest value, or the declared maximum, `max_trip_count`), and a loop that would run past
it stops with an error. Scan (opset 9+) runs as such a Loop."""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator, Optional, Sequence

import numpy as np
import onnx

from core.errors import ShapeError
from core.graph.ir import Graph, Node, TensorType

from ..function_scope import BOUND_SUFFIX, SHAPE_SUFFIX, ReadsRunTimeLength
from .registry import ConvertContext

MAX_TRIP_COUNT: ContextVar[Optional[int]] = ContextVar("kiln_max_trip_count", default=None)
DECLARE_BOUND = "give one with --max-trip-count N (compile(max_trip_count=N), a job's \"max_trip_count\")"
MAX_SCAN_BYTES = 1 << 30  # room a loop's scan outputs may take (trip bound x element bytes), each


@contextmanager
def max_trip_count(bound: Optional[int]) -> Iterator[None]:
    """Imports in this block size the scan outputs of loops whose trip count is known only at run time for at
    most `bound` iterations (None: such loops with scan outputs are refused)."""
    if bound is not None and (int(bound) != bound or bound < 1):
        raise ShapeError(f"the maximum trip count must be a positive integer, got {bound!r}")
    token = MAX_TRIP_COUNT.set(None if bound is None else int(bound))
    try:
        yield
    finally:
        MAX_TRIP_COUNT.reset(token)


def _function(ctx: ConvertContext, graph: onnx.GraphProto, formals, which: str, lengths=None,
              bounded: Sequence[str] = (), run_time_shapes: bool = False,
              bound_axes: Optional[dict] = None) -> tuple[Graph, list[str]]:
    """The subgraph imported on its own; its outputs are the ONNX ones, then the `::bound` of those in `bounded`
    (`run_time_shapes`, an If branch: of any bounded one), then (an If branch) the `::shape` of those a nested If
    shapes at run time; `bound_axes` gets the axis of each bounded output (name -> axis)."""
    name = f"{ctx.node.name or ctx.hint}_{which}"
    function, captured = ctx.scope.import_function(graph, formals, name, lengths or {}, run_time_shapes, bound_axes)
    extra = [o for o in function.outputs[len(graph.output):] if not (run_time_shapes and o.endswith(SHAPE_SUFFIX))]
    if run_time_shapes:
        bounded = [o for o in (p.name for p in graph.output) if f"{o}{BOUND_SUFFIX}" in extra]
    if extra != [f"{o}{BOUND_SUFFIX}" for o in bounded]:
        raise ReadsRunTimeLength(f"the {which} gives outputs that are sequences or have run-time lengths, which a "
                                 f"subgraph run at run time cannot pass out yet")
    return function, captured


def _given(graph: onnx.GraphProto, function: Graph, suffix: str) -> tuple[int, ...]:
    """The outputs whose valid length (`::bound`) or shape (`::shape`: a nested If's branches differ in rank) a
    branch gives at run time, in the order of those outputs of its graph, which follow the ONNX ones."""
    names = [o.name for o in graph.output]
    return tuple(names.index(o[:-len(suffix)]) for o in function.outputs[len(names):] if o.endswith(suffix))


def _bounded_axis(types: Sequence[TensorType], given_axes: Sequence[int]) -> Optional[int]:
    """The one axis along which the branches' `types` of an output differ, or along which a branch gives its
    run-time length (`given_axes`); None when they differ otherwise (ranks, several axes) or not at all."""
    if len({t.rank for t in types}) != 1 or -1 in given_axes:
        return None
    axes = {a for a in range(types[0].rank) if len({t.shape[a] for t in types}) > 1} | set(given_axes)
    return axes.pop() if len(axes) == 1 else None


def _padded(branch: Graph, j: int, slot: TensorType) -> Graph:
    """`branch` with output j padded up to `slot` at its end (a bounded value's layout: entry i of every row at
    the same place), where writing it first in the slot would not give that layout."""
    ttype = branch.type_of(branch.outputs[j])
    grown = [a for a in range(ttype.rank) if ttype.shape[a] != slot.shape[a]]
    if not grown or int(np.prod(ttype.shape[:grown[0]])) == 1:
        return branch
    pads = [0] * ttype.rank + [s - d for s, d in zip(slot.shape, ttype.shape)]
    value = f"{branch.outputs[j]}::padded"
    pad = Node("Pad", (branch.outputs[j],), (value,), {"pads": tuple(pads), "mode": "constant", "value": 0.0},
               name=value)
    outputs = list(branch.outputs)
    outputs[j] = value
    return branch.replace(nodes=branch.nodes + (pad,), outputs=tuple(outputs), types={**branch.types, value: slot})


def _merged(ctx: ConvertContext, index: int, types: list[TensorType]) -> tuple[TensorType, bool]:
    """The output slot for the branches' `types` of one output, and whether their shapes differ."""
    if len({t.dtype for t in types}) > 1:
        ctx.unsupported(f"the branches give output {index} as different types {[str(t) for t in types]}")
    if len(set(types)) == 1:
        return types[0], False
    if len({t.rank for t in types}) == 1:
        return TensorType(tuple(max(d) for d in zip(*(t.shape for t in types))), types[0].dtype), True
    return TensorType((max(t.numel for t in types),), types[0].dtype), True


def run_time_if(ctx: ConvertContext, then_branch: onnx.GraphProto, else_branch: onnx.GraphProto) -> list[str]:
    condition = ctx.input(0)
    ttype = ctx.builder.type_of(condition)
    if ttype.dtype != "bool" or ttype.numel != 1:
        ctx.fail(f"the condition must be a one-element bool tensor, got {ttype}")
    branches, refusals, captured, given, lengths = [], [], [], [], []
    for which, branch in (("then", then_branch), ("else", else_branch)):
        try:
            axes: dict[str, int] = {}
            function, reads = _function(ctx, branch, [], f"{which} branch", run_time_shapes=True, bound_axes=axes)
            branches.append(function)
            refusals.append("")
            captured.append(reads)
            given.append(_given(branch, function, SHAPE_SUFFIX))
            lengths.append({j: axes[branch.output[j].name] for j in _given(branch, function, BOUND_SUFFIX)})
        except ShapeError as err:  # this branch cannot run at these input shapes: an error only if it is taken
            branches.append(None)
            refusals.append(f"{ctx.where}: the {which} branch was taken, but it does not compile for the compiled "
                            f"input shapes ({err.message})")
            captured.append([])
            given.append(())
            lengths.append({})
    if all(b is None for b in branches):
        ctx.fail(f"neither branch compiles for these shapes: {refusals[0]}; {refusals[1]}")
    if len(then_branch.output) != len(else_branch.output):
        ctx.fail(f"the branches give {len(then_branch.output)} and {len(else_branch.output)} outputs")
    compiled = [k for k, b in enumerate(branches) if b is not None]
    inputs = [condition] + list(dict.fromkeys(v for reads in captured for v in reads))
    inputs_of = tuple(tuple(inputs.index(v) for v in reads) for reads in captured)
    slots, shaped, paired = [], [], []
    for j in range(len(then_branch.output)):
        types = [branches[k].type_of(branches[k].outputs[j]) for k in compiled]
        slot, differ = _merged(ctx, j, types)
        slots.append(slot)
        given_axes = [lengths[k][j] for k in compiled if j in lengths[k]]
        axis = None if any(j in given[k] for k in compiled) else _bounded_axis(types, given_axes)
        if axis is not None:  # each branch's own length there (None: it gives it at run time, or cannot run)
            paired.append((j, axis, tuple(None if b is None or j in n else b.type_of(b.outputs[j]).shape[axis]
                                          for b, n in zip(branches, lengths))))
            for k in compiled:
                branches[k] = _padded(branches[k], j, slot)
        elif any(j in lengths[k] for k in compiled):  # both branches inlined then, selected by Where
            raise ReadsRunTimeLength(f"output {j} has a run-time length in a branch, and the branches' shapes "
                                     f"{[str(t) for t in types]} differ along other axes too")
        elif differ or any(j in given[k] for k in compiled):
            shaped.append(j)
    rank = max((_rank_of(branches[k], given[k], j) for k in compiled for j in shaped), default=0)
    out_types = tuple(slots) + tuple(TensorType((1 + rank,), "int64") for _ in shaped)
    out_types += tuple(TensorType((2,), "int64") for _ in paired)
    outputs = ctx.builder.add_unbounded_node("If", inputs, len(out_types), ctx.hint, foldable=False,
                                             branches=tuple(branches), refusals=tuple(refusals), inputs_of=inputs_of,
                                             out_types=out_types, shaped=tuple(shaped), given_shapes=tuple(given),
                                             paired=tuple(paired), given_lengths=tuple(tuple(sorted(n)) for n in lengths))
    for j, shape in zip(shaped, outputs[len(slots):]):
        ctx.builder.run_time_shapes[outputs[j]] = shape
    for (j, axis, _), pair in zip(paired, outputs[len(slots) + len(shaped):]):
        ctx.builder.bound_value(outputs[j], pair, axis)
    return outputs[:len(slots)]


def _rank_of(branch: Graph, given: Sequence[int], j: int) -> int:
    """The largest rank output j of `branch` can have: its type's, or what its `::shape` output has room for."""
    if j in given:
        return branch.type_of(branch.outputs[len(branch.outputs) - len(given) + given.index(j)]).shape[0] - 1
    return branch.type_of(branch.outputs[j]).rank


def _scalar(ctx: ConvertContext, value: str, dtype: str, what: str) -> None:
    ttype = ctx.builder.type_of(value)
    if ttype.dtype != dtype or ttype.numel != 1:
        ctx.fail(f"{what} must be a one-element {dtype} tensor, got {ttype}")


def _trip_bound(ctx: ConvertContext, trip_count: str) -> Optional[int]:
    """The most iterations the loop can run, when known at compile time: M constant, M's largest value (a run-time
    int), or the declared maximum trip count."""
    known = []
    if trip_count:
        constant = ctx.builder.constant_value(trip_count)
        largest = constant if constant is not None else ctx.builder.runtime_ints.get(trip_count)
        if largest is not None:
            known.append(max(int(np.asarray(largest).reshape(-1)[0]), 0))
    if MAX_TRIP_COUNT.get() is not None:
        known.append(MAX_TRIP_COUNT.get())
    return min(known) if known else None


def _growth(ctx: ConvertContext, j: int, before: TensorType, after: TensorType) -> tuple[int, int]:
    """(axis, entries added per iteration) of a loop-carried value that grows (a sequence of tokens)."""
    differ = [a for a, (m, n) in enumerate(zip(before.shape, after.shape)) if m != n]
    if before.rank != after.rank or before.dtype != after.dtype or len(differ) != 1 or \
            after.shape[differ[0]] < before.shape[differ[0]]:
        ctx.unsupported(f"loop-carried value {j} goes from {before} to {after} in one iteration; a loop run at run "
                        f"time keeps a loop-carried value's shape or grows it along one axis")
    axis = differ[0]
    if int(np.prod(before.shape[:axis])) != 1:
        ctx.unsupported(f"loop-carried value {j} ({before} -> {after}) grows along an inner axis; Kiln grows a "
                        f"sequence along its outermost axis (all axes before it of size 1)")
    return axis, after.shape[axis] - before.shape[axis]


def run_time_loop(ctx: ConvertContext, body: onnx.GraphProto, carried: list, trip_count: Optional[str] = None,
                  condition: Optional[str] = None, full: bool = False) -> list:
    """The Loop node for `body` (M and the condition: the ONNX node's unless given; `full`: the body never ends
    the loop early, so scan outputs always hold M entries and carry no run-time length)."""
    if trip_count is None:
        trip_count = ctx.input(0) if ctx.has_input(0) else ""
        condition = ctx.input(1) if ctx.has_input(1) else ""
    if not trip_count and not condition:
        ctx.unsupported("a loop with neither a trip count M nor a condition never ends")
    if trip_count:
        _scalar(ctx, trip_count, "int64", "the trip count M")
    if condition:
        _scalar(ctx, condition, "bool", "the loop condition")
    if any(not isinstance(v, str) or v in ctx.builder.bounds for v in carried):
        ctx.unsupported("loop-carried sequences, optionals or values of run-time length at run time")
    if len(body.input) != 2 + len(carried):
        ctx.fail(f"the body takes {len(body.input)} inputs for {len(carried)} loop-carried values")
    bound = _trip_bound(ctx, trip_count)
    initial = [ctx.builder.type_of(v) for v in carried]

    def formals(types):
        return [(body.input[0].name, TensorType((), "int64")), (body.input[1].name, TensorType((), "bool"))] + \
            [(formal.name, t) for formal, t in zip(body.input[2:], types)]

    try:
        function, captured = _function(ctx, body, formals(initial), "loop body")
    except ReadsRunTimeLength as err:
        ctx.unsupported(str(err))
    outs = [function.type_of(o) for o in function.outputs]
    if len(outs) < 1 + len(carried):
        ctx.fail(f"the body gives {len(outs)} outputs for {len(carried)} loop-carried values")
    growing = {j: _growth(ctx, j, t, u) for j, (t, u) in enumerate(zip(initial, outs[1:1 + len(carried)])) if t != u}
    slots = list(initial)
    if growing:  # compiled at the largest size, with the valid length as a run-time input
        if bound is None:
            ctx.unsupported(f"loop-carried value {min(growing)} grows each iteration, so it needs room for every "
                            f"iteration, but the trip count is known only at run time and no maximum is declared: "
                            f"{DECLARE_BOUND}")
        for j, (axis, step) in growing.items():
            shape = list(initial[j].shape)
            shape[axis] += step * bound
            slots[j] = TensorType(tuple(shape), initial[j].dtype)
        function, captured = _function(ctx, body, formals(slots), "loop body",
                                       {body.input[2 + j].name: axis for j, (axis, _) in growing.items()},
                                       [body.output[1 + j].name for j in sorted(growing)])
        outs = [function.type_of(o) for o in function.outputs[:len(body.output)]]
    if outs[0].dtype != "bool" or outs[0].numel != 1:
        ctx.fail(f"the body's condition output must be a one-element bool tensor, got {outs[0]}")
    for j, (slot, after) in enumerate(zip(slots, outs[1:1 + len(carried)])):
        if after.numel < slot.numel or after.dtype != slot.dtype or (j not in growing and after != slot):
            ctx.unsupported(f"loop-carried value {j} goes from {slot} to {after} in one iteration at its largest size")
    scans = outs[1 + len(carried):]
    if scans and bound is None:
        ctx.unsupported("its scan outputs need room for every iteration, but the trip count is known only at run "
                        f"time and no maximum is declared: {DECLARE_BOUND}")
    for j, t in enumerate([*scans, *slots]):
        if (bound if j < len(scans) else 1) * t.nbytes > MAX_SCAN_BYTES:
            ctx.unsupported(f"{t} for up to {bound} iterations would take more than {MAX_SCAN_BYTES} bytes; declare "
                            f"a smaller --max-trip-count")
    out_types = tuple(slots) + tuple(TensorType((bound, *t.shape), t.dtype) for t in scans)
    out_types += (TensorType((1,), "int64"),) + tuple(TensorType((2,), "int64") for _ in growing)
    outputs = ctx.builder.add_unbounded_node("Loop", [trip_count, condition, *carried, *captured], len(out_types),
                                             ctx.hint, foldable=False, body=function, carried=len(carried),
                                             growing=tuple((j, growing[j][0]) for j in sorted(growing)),
                                             trip_bound=bound or 0, out_types=out_types)
    finals, stacked = outputs[:len(carried)], outputs[len(carried):len(carried) + len(scans)]
    count, pairs = outputs[len(carried) + len(scans)], outputs[len(carried) + len(scans) + 1:]
    for (j, (axis, _)), pair in zip(sorted(growing.items()), pairs):  # valid up to its length (runtime-trimmed)
        ctx.builder.bound_value(finals[j], pair, axis)
    if stacked and not full:  # scan outputs hold `count` entries along axis 0 (the runtime trims the rest)
        pair = ctx.emit1("Concat", [ctx.const(np.array([0], np.int64)), count], axis=0)
        for value in stacked:
            ctx.builder.bound_value(value, pair, 0)
    return finals + stacked


def run_time_scan(ctx: ConvertContext, body: onnx.GraphProto, states: list[str], axes: Sequence[int],
                  directions: Sequence[int], output_axes: Sequence[int], output_directions: Sequence[int],
                  steps: int) -> list[str]:
    """Scan (opset 9+) as a Loop of `steps` iterations whose body first takes each scan input's entry i (or
    steps-1-i, reversed) from the enclosing scope; then each scan output reversed and moved to its axis."""
    loop_body = onnx.GraphProto()
    loop_body.CopyFrom(body)
    del loop_body.node[:], loop_body.input[:], loop_body.output[:]
    num_states = len(states)
    prefix = f"{ctx.hint}::scan"
    counter, flag, last = f"{prefix}::i", f"{prefix}::cond", f"{prefix}::last"
    loop_body.input.extend([onnx.helper.make_tensor_value_info(counter, onnx.TensorProto.INT64, []),
                            onnx.helper.make_tensor_value_info(flag, onnx.TensorProto.BOOL, []),
                            *body.input[:num_states]])
    nodes = [onnx.helper.make_node("Constant", [], [last], value=onnx.numpy_helper.from_array(np.int64(steps - 1)))]
    for k, (formal, axis, reverse) in enumerate(zip(body.input[num_states:], axes, directions)):
        index = counter
        if reverse:
            index = f"{prefix}::reversed{k}"
            nodes.append(onnx.helper.make_node("Sub", [last, counter], [index]))
        nodes.append(onnx.helper.make_node("Gather", [ctx.node.input[num_states + k], index], [formal.name], axis=axis))
    nodes.append(onnx.helper.make_node("Identity", [flag], [f"{prefix}::go_on"]))
    loop_body.node.extend([*nodes, *body.node])
    loop_body.output.extend([onnx.helper.make_tensor_value_info(f"{prefix}::go_on", onnx.TensorProto.BOOL, []),
                             *body.output])
    results = run_time_loop(ctx, loop_body, list(states), ctx.const(np.array(steps, np.int64)), "", full=True)
    outputs = results[:num_states]
    for value, axis, reverse in zip(results[num_states:], output_axes, output_directions):
        if reverse:
            value = ctx.emit1("Gather", [value, ctx.const(np.arange(steps - 1, -1, -1, dtype=np.int64))], axis=0)
        rank = ctx.builder.type_of(value).rank
        axis = ctx.axis(axis, rank, "scan_output_axes")
        if axis:
            perm = list(range(1, rank))
            perm.insert(axis, 0)
            value = ctx.emit1("Transpose", [value], perm=tuple(perm))
        outputs.append(value)
    return outputs
