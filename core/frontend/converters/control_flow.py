"""If, Loop and Scan: resolved at import where that is cheap, else run at run time (control_flow_runtime.py).

- If with a condition known at compile time (a constant, one computed from shapes, or a graph input
  core.backend specializes on, like silero VAD's `sr`) imports only the taken branch. With a condition
  computed from data, each branch becomes a graph of its own, compiled as its own function, and only the
  taken branch runs (its outputs may differ in shape from the other's). Branches that read or give values
  of run-time length (core/graph/bounded.py) are imported inline instead, both computed and selected by Where.
- Loop and Scan with a small constant trip count are unrolled (an optimization): the body is imported
  once per iteration with the iteration number as a constant, so shapes may even change from one
  iteration to the next (a growing sequence). A Loop condition computed at run time is then honoured
  by masking: every iteration up to M runs and the loop-carried values keep their last value once it
  turns false; scan outputs then come at M entries plus a `name::bound` giving how many are valid.
  A Loop whose trip count is known only at run time, or that would unroll into more than
  MAX_UNROLLED_NODES body nodes, runs at run time instead: its body compiled once, the entry looping.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import onnx

from core.errors import ShapeError

from ..onnx_values import numpy_dtype
from ..function_scope import ReadsRunTimeLength
from ..structured_values import Value
from .control_flow_runtime import run_time_if, run_time_loop, run_time_scan
from .registry import ConvertContext, accepts_structured, converter
from .structure_helpers import as_flag, select, stack, take

MAX_UNROLLED_NODES = 4096  # body nodes one Loop/Scan may unroll into (iterations x body size): ~20 ms of compile each


def _check_unroll(ctx: ConvertContext, body: onnx.GraphProto, iterations: int, what: str) -> None:
    if iterations * max(len(body.node), 1) > MAX_UNROLLED_NODES:
        count = f"{iterations}" if iterations < np.iinfo(np.int64).max else "an unbounded number of"
        ctx.unsupported(f"{what} of {count} iterations over a {len(body.node)}-node body would unroll "
                        f"into more than {MAX_UNROLLED_NODES} nodes, and only Loop and opset-9 Scan run at run time")


def _known_flag(ctx: ConvertContext, value: str) -> bool | None:
    array = ctx.builder.constant_value(value)
    if array is None:
        return None
    if array.size != 1:
        ctx.fail(f"a condition must have one element, got shape {list(array.shape)}")
    return bool(array.reshape(()))


def _bind(body: onnx.GraphProto, values: Sequence[Value]) -> dict[str, Value]:
    return {formal.name: value for formal, value in zip(body.input, values)}


@converter("If", since_version=1)
@accepts_structured
def if_(ctx: ConvertContext) -> list[Value]:
    then_branch, else_branch = ctx.attr("then_branch"), ctx.attr("else_branch")
    if then_branch is None or else_branch is None:
        ctx.fail("needs both then_branch and else_branch")
    known = _known_flag(ctx, ctx.input(0))
    if known is not None:
        return ctx.scope.import_graph(then_branch if known else else_branch, {})
    try:
        return run_time_if(ctx, then_branch, else_branch)
    except ReadsRunTimeLength:  # values of run-time length in or out: both branches inline, selected by Where
        pass
    flag = as_flag(ctx, ctx.input(0), "the condition")
    then_values = _import_branch(ctx, then_branch, "then")
    else_values = _import_branch(ctx, else_branch, "else")
    if len(then_values) != len(else_values):
        ctx.fail(f"the branches give {len(then_values)} and {len(else_values)} outputs")
    return [select(ctx, flag, t, e, f"output {i} of the two branches") for i, (t, e)
            in enumerate(zip(then_values, else_values))]


def _import_branch(ctx: ConvertContext, branch: onnx.GraphProto, which: str) -> list[Value]:
    try:
        return ctx.scope.import_graph(branch, {})
    except ShapeError as err:  # an untaken branch may well not fit these shapes: say why it was compiled at all
        ctx.unsupported(f"the branches read values whose length is known only at run time, so both are compiled "
                        f"and selected, and the {which} branch does not compile for these shapes ({err.message})")


class _RunTimeLoop(Exception):
    """Unrolling cannot finish (no trip count known at compile time, or too many iterations): run it at run time."""


@converter("Loop", since_version=1)
@accepts_structured
def loop(ctx: ConvertContext) -> list[Value]:
    carried: list[Value] = [ctx.value(i) for i in range(2, len(ctx.node.input))]
    try:
        return _unrolled_loop(ctx, carried)
    except _RunTimeLoop:  # what unrolling already emitted is dead code (eliminate_dead_code drops it)
        return run_time_loop(ctx, ctx.attr("body"), carried)


def _unrolled_loop(ctx: ConvertContext, carried: list[Value]) -> list[Value]:
    body = ctx.attr("body")
    trip_count = None
    if ctx.has_input(0):
        array = ctx.builder.constant_value(ctx.input(0))
        if array is None:
            raise _RunTimeLoop
        trip_count = int(array.reshape(()))
    running: str | None = ctx.input(1) if ctx.has_input(1) else None  # None: always true
    if running is not None and _known_flag(ctx, running) is True:
        running = None
    if running is not None and _known_flag(ctx, running) is None and (
            trip_count is None or trip_count * max(len(body.node), 1) > MAX_UNROLLED_NODES):
        raise _RunTimeLoop  # a run-time condition never becomes known: masking would unroll past the cap
    # M may be huge (torch exports a `while` as M = INT64_MAX plus a condition): stop when the condition
    # turns false at compile time, and give up only past the unroll cap.
    cap = MAX_UNROLLED_NODES // max(len(body.node), 1)
    scans: list[list[Value]] = []
    executed: str | None = None  # with a run-time condition: how many iterations really ran (int64)
    true = ctx.const(np.array(True))
    iteration = 0
    while trip_count is None or iteration < trip_count:
        if running is not None and _known_flag(ctx, running) is False:
            break
        if (trip_count is None and running is not None) or iteration >= cap:
            raise _RunTimeLoop
        counter = ctx.const(np.array(iteration, dtype=np.int64))
        outputs = ctx.scope.import_graph(body, _bind(body, [counter, running or true, *carried]))
        if len(outputs) < 1 + len(carried):
            ctx.fail(f"the body gives {len(outputs)} outputs for {len(carried)} loop-carried values")
        condition, updated, scanned = outputs[0], outputs[1:1 + len(carried)], outputs[1 + len(carried):]
        if not isinstance(condition, str):
            ctx.fail("the body's condition output must be a tensor")
        scans.append(scanned)
        if running is None:
            carried, running = list(updated), condition
        else:  # a run-time condition: the iteration's results count only while it holds
            flag = as_flag(ctx, running, "the loop condition")
            carried = [select(ctx, flag, new, old, f"loop-carried value {i} after and before an iteration")
                       for i, (new, old) in enumerate(zip(updated, carried))]
            running = ctx.emit1("And", [flag, as_flag(ctx, condition, "the loop condition")])
            ran = ctx.emit1("Cast", [flag], to="int64")
            executed = ctx.emit1("Add", [executed or ctx.const(np.array(iteration, np.int64)), ran])
        if running is not None and _known_flag(ctx, running) is True:
            running = None
        iteration += 1
    body_outputs = list(body.output)[1 + len(carried):]
    stacked = [_stack_scan(ctx, [step[j] for step in scans], body_outputs[j], j) for j in range(len(body_outputs))]
    if executed is not None and stacked:  # scan outputs of data-dependent length: padded, plus their bound
        bound = ctx.emit1("Concat", [ctx.const(np.array([0], np.int64)), ctx.reshape(executed, (1,))], axis=0)
        for value in stacked:
            ctx.builder.bound_value(value, bound, 0)
    return carried + stacked


def _stack_scan(ctx: ConvertContext, steps: list[Value], declared: onnx.ValueInfoProto, index: int) -> str:
    if any(not isinstance(s, str) for s in steps):
        ctx.fail(f"scan output {index} must be a tensor")
    if steps:
        shapes = {ctx.builder.type_of(s).shape for s in steps}
        if len(shapes) > 1:
            ctx.fail(f"scan output {index} changes shape between iterations: {sorted(shapes)}")
        return stack(ctx, steps, 0)
    tensor = declared.type.tensor_type  # no iteration ran: an empty output of the declared element shape
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
    if not tensor.HasField("shape") or None in dims:
        ctx.unsupported(f"scan output {index} after zero iterations needs the body to declare its shape")
    return ctx.const(np.zeros([0, *dims], dtype=numpy_dtype(tensor.elem_type, ctx.where)))


@converter("Scan", since_version=9)
def scan(ctx: ConvertContext) -> list[str]:
    body = ctx.attr("body")
    inputs = [ctx.input(i) for i in range(len(ctx.node.input))]
    num_scan = int(ctx.attr("num_scan_inputs"))
    states, sequences = inputs[:len(inputs) - num_scan], inputs[len(inputs) - num_scan:]
    num_outputs = len(body.output) - len(states)
    axes = [ctx.axis(a, ctx.builder.type_of(x).rank, "scan_input_axes")
            for a, x in zip(ctx.attr("scan_input_axes", [0] * num_scan), sequences)]
    return _scan(ctx, body, states, sequences, axes, ctx.attr("scan_input_directions", [0] * num_scan),
                 ctx.attr("scan_output_axes", [0] * num_outputs),
                 ctx.attr("scan_output_directions", [0] * num_outputs))


@converter("Scan", since_version=8)
def scan_batched(ctx: ConvertContext) -> list[str]:
    """Opset 8: a leading batch axis on every input, optional per-batch sequence_lens."""
    body = ctx.attr("body")
    inputs = [ctx.input(i) for i in range(1, len(ctx.node.input))]
    num_scan = int(ctx.attr("num_scan_inputs"))
    states, sequences = inputs[:len(inputs) - num_scan], inputs[len(inputs) - num_scan:]
    full = ctx.builder.type_of(sequences[0]).shape[1]
    lengths = ctx.optional_constant(0, "sequence_lens")
    if lengths is not None and np.any(lengths != full):
        ctx.unsupported(f"sequence_lens {lengths.tolist()} shorter than the scan axis ({full})")
    num_outputs = len(body.output) - len(states)
    directions = ctx.attr("directions", [0] * num_scan)
    per_batch = []
    for b in range(ctx.builder.type_of(inputs[0]).shape[0]):
        per_batch.append(_scan(ctx, body, [take(ctx, s, 0, b) for s in states],
                               [take(ctx, x, 0, b) for x in sequences], [0] * num_scan, directions,
                               [0] * num_outputs, [0] * num_outputs))
    return [stack(ctx, [outputs[j] for outputs in per_batch], 0) for j in range(len(body.output))]


def _scan(ctx: ConvertContext, body: onnx.GraphProto, states: list[str], sequences: list[str], axes: list[int],
          directions: Sequence[int], output_axes: Sequence[int], output_directions: Sequence[int]) -> list[str]:
    lengths = {ctx.builder.type_of(x).shape[axis] for x, axis in zip(sequences, axes)}
    if len(lengths) != 1:
        ctx.fail(f"scan inputs have different lengths along their scan axes: {sorted(lengths)}")
    steps = lengths.pop()
    if steps == 0:
        ctx.unsupported("a scan over zero steps")
    if steps * max(len(body.node), 1) > MAX_UNROLLED_NODES:  # too long to unroll: its body runs at run time
        if ctx.opset < 9:
            _check_unroll(ctx, body, steps, "an opset-8 scan")
        return run_time_scan(ctx, body, states, axes, directions, output_axes, output_directions, steps)
    scanned: list[list[Value]] = []
    for t in range(steps):
        items = [take(ctx, x, axis, steps - 1 - t if reverse else t)
                 for x, axis, reverse in zip(sequences, axes, directions)]
        outputs = ctx.scope.import_graph(body, _bind(body, [*states, *items]))
        states, step_outputs = list(outputs[:len(states)]), outputs[len(states):]
        if any(not isinstance(v, str) for v in outputs):
            ctx.fail("Scan bodies give tensors only")
        scanned.append(step_outputs)
    results = list(states)
    for j, (axis, reverse) in enumerate(zip(output_axes, output_directions)):
        column = [step[j] for step in scanned]
        rank = ctx.builder.type_of(column[0]).rank
        results.append(stack(ctx, column[::-1] if reverse else column, ctx.axis(axis, rank + 1, "scan_output_axes")))
    return results
