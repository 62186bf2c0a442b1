"""import_onnx: ONNX model -> graph IR with static shapes, every op converted by its registered
converter for the model's opset. All unsupported ops are collected and reported together.

Subgraphs (If branches, Loop/Scan bodies) are imported inline into the same graph by their converters
through `_Scope`, seeing every value of the enclosing scopes; ONNX sequences and optionals are
compile-time structures over tensor values (structured_values), flattened at the graph outputs."""
from __future__ import annotations

import sys
from collections import ChainMap
from contextlib import contextmanager
from typing import Mapping, MutableMapping, Optional, Sequence

import numpy as np
import onnx

from core.errors import KilnError, ShapeError, UnsupportedOpError
from core.graph.bounded import Bound, bound_pair
from core.graph.builder import GraphBuilder
from core.graph.ir import Graph, TensorType
from core.graph.length_inputs import (Affine, add_length_inputs, affine_length, filled_values, output_lengths,
                                     skippable_bounds, skippable_outputs)

from .converters import ConvertContext, UnsupportedFeature, find_converter
from .converters.registry import canonical_domain
from .function_scope import BOUND_SUFFIX, SHAPE_SUFFIX
from .model_loading import ModelSource, load_model
from .onnx_values import attribute_values, declared_dims, numpy_dtype, tensor_to_array
from .structured_values import OptionalValue, SequenceValue, Value, flatten, is_structured, kind_of

# Ops that pass a sequence or optional through unchanged (their tensor converters never see it).
_STRUCTURE_PASSTHROUGH = {"Identity"}


def import_onnx(model: ModelSource, input_shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    return _import(model, input_shapes)[0]


def import_onnx_with_lengths(model: ModelSource, input_shapes: Mapping[str, Sequence[int]],
                             lengths: Mapping[str, Mapping[int, tuple[Sequence[str], int]]], sizes: Mapping[str, int],
                             floors: Optional[Mapping[str, int]] = None) -> tuple[Graph, dict[str, dict[int, Affine]]]:
    """import_onnx where the input dims of `lengths` (input -> axis -> the variables adding up to it, plus a
    constant) take any size up to `input_shapes`' at run time (core/graph/length_inputs.py): the graph's inputs
    are the model's, then one int64 [1] length per variable of `sizes` (variable -> its largest size; `floors`:
    its smallest). Also
    returns each output's run-time lengths (output -> axis -> ({variable: coefficient}, constant)). ShapeError
    when an op cannot take a run-time length."""
    return _import(model, input_shapes, (lengths, sizes, floors))


def _import(model: ModelSource, input_shapes, lengths=None) -> tuple[Graph, dict[str, dict[int, Affine]]]:
    proto = load_model(model)
    graph = proto.graph
    opsets = {canonical_domain(o.domain): int(o.version) for o in proto.opset_import}
    builder = GraphBuilder(graph.name or "model")
    builder.reserve_names(o.name for o in graph.output)
    values: dict[str, Value] = {}  # ONNX value name -> graph-IR value name (or a sequence/optional of them)

    initializers = {t.name for t in graph.initializer}
    graph_inputs = [i for i in graph.input if i.name not in initializers]
    for name, ttype in _input_types(graph_inputs, dict(input_shapes or {})).items():
        values[name] = builder.add_input(name, ttype)  # first, so that inputs keep their exact names
    symbols = add_length_inputs(builder, *lengths) if lengths is not None else None
    for tensor in graph.initializer:
        values[tensor.name] = builder.add_constant(tensor_to_array(tensor, "initializer"), tensor.name)

    _convert_nodes(graph, opsets, builder, values)
    run_time, skippable, fills = {}, {}, {}
    with _deep_length_arithmetic():
        if symbols is not None:
            run_time, skippable, fills = _run_time_lengths(graph, builder, values, symbols)
    builder.set_outputs(_bind_outputs(graph, builder, values))
    graph = builder.build()
    if symbols is not None:  # the outputs themselves: the runtime cuts them at their lengths
        skippable.update(skippable_outputs(run_time, symbols, graph.outputs))
    return graph.replace(run_time_bounds=skippable, run_time_fills=fills), run_time


@contextmanager
def _deep_length_arithmetic():
    """Room for following a length through a detector's long chain of shape arithmetic (each op one level of
    length_inputs.affine_length's walk; Python calls take no C stack since 3.11)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20000))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def _run_time_lengths(graph: onnx.GraphProto, builder: GraphBuilder, values: dict, symbols):
    """(each output's run-time lengths, skippable bounds, fills); the bounds left are those of outputs whose
    length depends on the data, which get `::bound` outputs."""
    # the runtime cuts the outputs by their lengths (no `::bound` outputs) but for those whose length depends on
    # the data (detections after NMS), which keep theirs
    outputs = {o.name: values[o.name] for o in graph.output if isinstance(values[o.name], str)}
    counted = {name: value for name, value in outputs.items() if _data_dependent(builder, value, symbols)}
    run_time = output_lengths(builder, {n: v for n, v in outputs.items() if n not in counted}, symbols)
    skippable, fills = skippable_bounds(builder, symbols), filled_values(builder, symbols)
    kept = {value: builder.bounds[value] for value in counted.values()}
    builder.bounds.clear()
    builder.bounds.update(kept)
    return run_time, skippable, fills


def _data_dependent(builder: GraphBuilder, value: str, symbols) -> bool:
    """An output bounded along one axis by a length that is no sum of the input lengths (a count of detections);
    not one that a run-time If picks among such sums (its branches' lengths), which stays refused."""
    bound = builder.bounds.get(value)
    if not isinstance(bound, Bound) or affine_length(builder, bound.length, symbols) is not None:
        return False
    node = builder.producer(bound.length)
    return not (node is not None and node.op == "Where"
                and all(affine_length(builder, side, symbols) is not None for side in node.inputs[1:]))


def _input_types(inputs: Sequence[onnx.ValueInfoProto], shapes: dict[str, Sequence[int]]) -> dict[str, TensorType]:
    unknown = sorted(set(shapes) - {i.name for i in inputs})
    if unknown:
        raise ShapeError(f"--input-shape names unknown inputs {unknown}; the model's inputs are "
                         f"{[i.name for i in inputs]}")
    types, unresolved = {}, []
    for value in inputs:
        if not value.type.HasField("tensor_type"):
            raise ShapeError(f"input {value.name!r} is not a tensor but a sequence or optional; a compiled model "
                             f"takes tensors only (core.backend feeds a sequence as tensor inputs {value.name}::0, "
                             f"{value.name}::1, ...)")
        tensor = value.type.tensor_type
        dtype = numpy_dtype(tensor.elem_type, f"input {value.name!r}")
        declared = declared_dims(tensor)
        if value.name in shapes:
            types[value.name] = TensorType(_fixed_shape(value.name, declared, shapes[value.name]), dtype)
            continue
        if declared is None or any(isinstance(d, str) for d in declared):
            unresolved.append((value.name, declared))
            continue
        types[value.name] = TensorType(declared, dtype)
    if unresolved:
        parts = []
        for name, declared in unresolved:
            if declared is None:
                parts.append(f"input {name!r} has no declared shape")
            else:
                symbolic = ", ".join(f"dim {i} ({d!r})" for i, d in enumerate(declared) if isinstance(d, str))
                parts.append(f"input {name!r} has symbolic {symbolic}")
        example = " ".join(f"--input-shape {name}=d0,d1,..." for name, _ in unresolved)
        raise ShapeError(f"{'; '.join(parts)}: fix the shape with {example}")
    return types


def _fixed_shape(name: str, declared: list | None, given: Sequence[int]) -> tuple[int, ...]:
    shape = tuple(int(d) for d in given)
    if any(d < 0 for d in shape):
        raise ShapeError(f"--input-shape {name}: dimensions must be non-negative, got {list(shape)}")
    if declared is not None:
        if len(declared) != len(shape):
            raise ShapeError(f"--input-shape {name}: the model declares rank {len(declared)} {declared}, "
                             f"got {list(shape)}")
        clashes = [i for i, (d, g) in enumerate(zip(declared, shape)) if isinstance(d, int) and d != g]
        if clashes:
            raise ShapeError(f"--input-shape {name}={','.join(map(str, shape))} contradicts the model's fixed "
                             f"shape {declared} at dim {clashes[0]}")
    return shape


class _Scope:
    """Imports a subgraph into the enclosing builder: its nodes see the enclosing values (ONNX's outer
    scope) plus `bindings` for its own inputs, and what it defines stays inside it."""

    def __init__(self, opsets: dict[str, int], builder: GraphBuilder, values: MutableMapping[str, Value]):
        self.opsets, self.builder, self.values = opsets, builder, values

    def import_graph(self, graph: onnx.GraphProto, bindings: Mapping[str, Value]) -> list[Value]:
        # writes land in the subgraph's own layer: no copy of the enclosing values per unrolled iteration
        inner = ChainMap(dict(bindings), self.values)
        for tensor in graph.initializer:
            inner[tensor.name] = self.builder.add_constant(tensor_to_array(tensor, "initializer"), tensor.name)
        _convert_nodes(graph, self.opsets, self.builder, inner)
        missing = [o.name for o in graph.output if o.name not in inner]
        if missing:
            raise ShapeError(f"subgraph {graph.name!r}: outputs {missing} are never produced")
        return [inner[o.name] for o in graph.output]

    def import_function(self, graph: onnx.GraphProto, formals: Sequence[tuple[str, TensorType]], name: str,
                        lengths: Mapping[str, int] = {}, run_time_shapes: bool = False,
                        bound_axes: dict[str, int] | None = None) -> tuple[Graph, list[str]]:
        """`graph` as a graph of its own (an If branch or Loop body run at run time, each compiled as a function):
        its inputs are `formals` (ONNX name, type), then an int64 [1] length per formal of `lengths` (formal -> the
        axis along which only that many entries are valid: a sequence growing per iteration), then each enclosing
        value it reads (returned, in that order). A bounded output comes with its `::bound` output ([axis, length]);
        with `run_time_shapes` (an If branch), an output whose shape a nested If decides at run time with its
        `::shape` output, else such an output is a ShapeError. `bound_axes`, when given, gets the axis of each
        bounded output (ONNX name -> axis)."""
        from .function_scope import OuterValues

        builder = GraphBuilder(name)
        builder.reserve_names(o.name for o in graph.output)
        values = OuterValues(builder, self.builder, self.values)
        for formal, ttype in formals:
            values[formal] = builder.add_input(builder.fresh_name(formal), ttype)
        for formal, axis in lengths.items():
            length = builder.add_input(builder.fresh_name(f"{formal}::length"), TensorType((1,), "int64"))
            builder.runtime_ints[length] = np.array([builder.type_of(values[formal]).shape[axis]], np.int64)
            builder.bounds[values[formal]] = Bound(length, axis)
        for tensor in graph.initializer:
            values[tensor.name] = builder.add_constant(tensor_to_array(tensor, "initializer"), tensor.name)
        _convert_nodes(graph, self.opsets, builder, values)
        missing = [o.name for o in graph.output if o.name not in values]
        if missing:
            raise ShapeError(f"subgraph {graph.name!r}: outputs {missing} are never produced")
        if bound_axes is not None:
            bounds = {o.name: builder.bounds[values[o.name]] for o in graph.output
                      if isinstance(values[o.name], str) and values[o.name] in builder.bounds}
            bound_axes.update({n: b.axis if isinstance(b, Bound) else -1 for n, b in bounds.items()})  # -1: several
        builder.set_outputs(_bind_outputs(graph, builder, {o.name: values[o.name] for o in graph.output}))
        if builder.run_time_shapes and not run_time_shapes:
            raise ShapeError(f"subgraph {graph.name!r} gives an output whose shape is known only at run time "
                             f"(an If inside it whose branches differ in shape)")
        return builder.build(), list(values.inputs)


def _referenced_names(graph: onnx.GraphProto) -> set[str]:
    """Every value name read by the graph's nodes, including from inside their subgraphs."""
    names = {name for node in graph.node for name in node.input if name}
    for node in graph.node:
        for attribute in node.attribute:
            for sub in ([attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else list(attribute.graphs)):
                names |= _referenced_names(sub) | {o.name for o in sub.output}
    return names


def _convert_nodes(graph: onnx.GraphProto, opsets: dict[str, int], builder: GraphBuilder,
                   values: MutableMapping[str, Value]) -> None:
    consumed = _referenced_names(graph) | {o.name for o in graph.output}
    problems: list[tuple[str, str, int]] = []
    reasons: list[str] = []
    poisoned: set[str] = set()  # outputs of nodes that could not be converted
    deferred_error: ShapeError | None = None
    for node in graph.node:
        domain = canonical_domain(node.domain)
        opset = opsets.get(domain, 0)
        fn = find_converter(domain, node.op_type, opset)
        if fn is None:
            problems.append((domain, node.op_type, opset))
        if fn is None or any(name in poisoned for name in node.input) or deferred_error is not None:
            poisoned.update(node.output)
            continue
        structured = {i: values[n] for i, n in enumerate(node.input) if n and is_structured(values.get(n))}
        if structured and node.op_type in _STRUCTURE_PASSTHROUGH and domain == "":
            values.update({out: structured[0] for out in node.output[:1] if out})
            continue
        inputs = ["" if i in structured else values.get(n, "") if n else "" for i, n in enumerate(node.input)]
        ctx = ConvertContext(builder, node, opset, inputs, {}, [bool(n) and n in consumed for n in node.output],
                             structured, _Scope(opsets, builder, values))
        try:
            if structured and not getattr(fn, "accepts_structured", False):
                index, value = next(iter(structured.items()))
                ctx.unsupported(f"input {index} is {kind_of(value)}, which this op does not take")
            _convert_one(fn, ctx, values, consumed)
        except UnsupportedOpError as err:  # from a subgraph: its ops join this graph's list
            problems.extend(err.ops)
            reasons.extend(getattr(err, "reasons", ()))
            poisoned.update(node.output)
        except UnsupportedFeature as err:
            problems.append((domain, node.op_type, opset))
            reasons.append(f"{ctx.where}: {err}")
            poisoned.update(node.output)
        except ShapeError as err:
            message = err.message if err.message.startswith(ctx.where) else f"{ctx.where}: {err.message}"
            deferred_error = ShapeError(message)
            poisoned.update(node.output)
    if problems:
        raise _unsupported(problems, reasons)
    if deferred_error is not None:
        raise deferred_error


def _convert_one(fn, ctx: ConvertContext, values: MutableMapping[str, Value], consumed: set[str]) -> None:
    node = ctx.node
    missing = [n for n in node.input if n and n not in values]
    if missing:
        ctx.fail(f"uses undefined values {missing}")
    try:
        ctx.attrs = attribute_values(node)
        produced = fn(ctx)
    except (KilnError, UnsupportedFeature):
        raise
    except Exception as err:  # a malformed attribute or an unforeseen combination: still one clear line
        raise ShapeError(f"{ctx.where}: cannot be converted ({type(err).__name__}: {err})") from err
    produced = [produced] if isinstance(produced, (str, SequenceValue, OptionalValue)) else list(produced)
    for index, name in enumerate(node.output):
        if index < len(produced):
            values[name] = produced[index]
        elif name in consumed:
            ctx.unsupported(f"output {index} is not supported")


def _unsupported(problems: list[tuple[str, str, int]], reasons: list[str]) -> UnsupportedOpError:
    error = UnsupportedOpError(problems)
    error.reasons = list(reasons)  # type: ignore[attr-defined]  (kept when a subgraph's list joins its parent's)
    if reasons:
        error.message = f"{error.message} ({'; '.join(reasons)})"
        error.args = (error.message,)
    return error


def _bind_outputs(graph: onnx.GraphProto, builder: GraphBuilder, values: dict[str, Value]) -> list[str]:
    """Graph outputs keep their ONNX names and are all produced by nodes (Identity if need be); a
    sequence or optional output is flattened into tensor outputs `name::0`, `name::1`, ...; an output
    with a data-dependent shape comes at its upper bound, followed by `name::bound` ([axis, length])."""
    for output in graph.output:
        if output.name not in values:
            raise ShapeError(f"graph output {output.name!r} is never produced")
    bounded = [(bound_name(o.name), bound_pair(builder, builder.bounds[values[o.name]])) for o in graph.output
               if isinstance(values[o.name], str) and values[o.name] in builder.bounds]
    bounded += [(shape_name(o.name), builder.run_time_shapes[values[o.name]]) for o in graph.output
                if isinstance(values[o.name], str) and values[o.name] in builder.run_time_shapes]
    builder.reserve_names(name for o in graph.output for name, _ in flatten(o.name, values[o.name]))
    builder.reserve_names(name for name, _ in bounded)
    names: list[str] = []
    for output in graph.output:
        for name, value in flatten(output.name, values[output.name]):
            names.append(_bind_output(builder, values, names, name, value))
        if not is_structured(values[output.name]):
            values[output.name] = names[-1]
    renamed: dict[str, str] = {}  # outputs may share one bound value, renamed by the first of them
    for name, bound in bounded:
        value = renamed.get(bound, bound)
        names.append(_bind_output(builder, values, names, name, value))
        if not builder.has_value(value):
            renamed[bound] = names[-1]
    return names


def bound_name(name: str) -> str:
    """The output that says how much of the data-dependent output `name` is valid (the runtime trims)."""
    return f"{name}{BOUND_SUFFIX}"


def shape_name(name: str) -> str:
    """The output giving the actual shape of `name` ([rank, dims...]: an If whose branches differ in shape);
    `name` then holds its elements first, contiguous (the runtime reshapes)."""
    return f"{name}{SHAPE_SUFFIX}"


def _bind_output(builder: GraphBuilder, values: dict[str, Value], bound: list[str], name: str, value: str) -> str:
    renameable = builder.is_node_output(value) and value not in bound
    if renameable and (value == name or not builder.has_value(name)):
        result = builder.rename_value(value, name)
        for key, other in values.items():  # other ONNX names (and sequences) may hold the renamed value
            values[key] = _renamed(other, value, name)
        return result
    target = name if not builder.has_value(name) else builder.fresh_name(name)
    return builder.add_identity(value, target)


def _renamed(value: Value, old: str, new: str) -> Value:
    if isinstance(value, SequenceValue):
        return SequenceValue(tuple(new if e == old else e for e in value.elements), value.elem_dtype)
    if isinstance(value, OptionalValue) and value.element is not None:
        return OptionalValue(_renamed(value.element, old, new))
    return new if value == old else value
