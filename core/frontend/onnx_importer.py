"""import_onnx: ONNX model -> graph IR with static shapes, every op converted by its registered
converter for the model's opset. All unsupported ops are collected and reported together."""
from __future__ import annotations

from typing import Mapping, Sequence

import onnx

from core.errors import KilnError, ShapeError, UnsupportedOpError
from core.graph.builder import GraphBuilder
from core.graph.ir import Graph, TensorType

from .converters import ConvertContext, UnsupportedFeature, find_converter
from .converters.registry import canonical_domain
from .model_loading import ModelSource, load_model
from .onnx_values import attribute_values, declared_dims, numpy_dtype, tensor_to_array


def import_onnx(model: ModelSource, input_shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    proto = load_model(model)
    graph = proto.graph
    opsets = {canonical_domain(o.domain): int(o.version) for o in proto.opset_import}
    builder = GraphBuilder(graph.name or "model")
    builder.reserve_names(o.name for o in graph.output)
    values: dict[str, str] = {}  # ONNX value name -> graph-IR value name

    initializers = {t.name for t in graph.initializer}
    graph_inputs = [i for i in graph.input if i.name not in initializers]
    for name, ttype in _input_types(graph_inputs, dict(input_shapes or {})).items():
        values[name] = builder.add_input(name, ttype)  # first, so that inputs keep their exact names
    for tensor in graph.initializer:
        values[tensor.name] = builder.add_constant(tensor_to_array(tensor, "initializer"), tensor.name)

    _convert_nodes(graph, opsets, builder, values)
    builder.set_outputs(_bind_outputs(graph, builder, values))
    return builder.build()


def _input_types(inputs: Sequence[onnx.ValueInfoProto], shapes: dict[str, Sequence[int]]) -> dict[str, TensorType]:
    unknown = sorted(set(shapes) - {i.name for i in inputs})
    if unknown:
        raise ShapeError(f"--input-shape names unknown inputs {unknown}; the model's inputs are "
                         f"{[i.name for i in inputs]}")
    types, unresolved = {}, []
    for value in inputs:
        if not value.type.HasField("tensor_type"):
            raise ShapeError(f"input {value.name!r} is not a tensor; only tensor inputs are supported")
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


def _convert_nodes(graph: onnx.GraphProto, opsets: dict[str, int], builder: GraphBuilder,
                   values: dict[str, str]) -> None:
    consumed = {name for node in graph.node for name in node.input if name} | {o.name for o in graph.output}
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
        ctx = ConvertContext(builder, node, opset, [values.get(n, "") if n else "" for n in node.input],
                             {}, [bool(n) and n in consumed for n in node.output])
        try:
            _convert_one(fn, ctx, values, consumed)
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


def _convert_one(fn, ctx: ConvertContext, values: dict[str, str], consumed: set[str]) -> None:
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
    produced = [produced] if isinstance(produced, str) else list(produced)
    for index, name in enumerate(node.output):
        if index < len(produced):
            values[name] = produced[index]
        elif name in consumed:
            ctx.unsupported(f"output {index} is not supported")


def _unsupported(problems: list[tuple[str, str, int]], reasons: list[str]) -> UnsupportedOpError:
    error = UnsupportedOpError(problems)
    if reasons:
        error.message = f"{error.message} ({'; '.join(reasons)})"
        error.args = (error.message,)
    return error


def _bind_outputs(graph: onnx.GraphProto, builder: GraphBuilder, values: dict[str, str]) -> list[str]:
    """Graph outputs keep their ONNX names and are all produced by nodes (Identity if need be)."""
    names = []
    for output in graph.output:
        value = values.get(output.name)
        if value is None:
            raise ShapeError(f"graph output {output.name!r} is never produced")
        renameable = builder.is_node_output(value) and value not in names
        if renameable and (value == output.name or not builder.has_value(output.name)):
            names.append(builder.rename_value(value, output.name))
            for onnx_name, bound in values.items():  # other ONNX names may alias the renamed value
                if bound == value:
                    values[onnx_name] = output.name
        else:
            target = output.name if not builder.has_value(output.name) else builder.fresh_name(output.name)
            names.append(builder.add_identity(value, target))
        values[output.name] = names[-1]
    return names
