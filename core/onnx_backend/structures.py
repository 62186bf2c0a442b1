"""Sequence and optional values at core.backend's boundary: a sequence/optional graph input becomes
tensor inputs (`x::0`, `x::1`, ...) rebuilt inside the model by SequenceConstruct/Optional nodes, and
flattened outputs are rebuilt into lists and Nones (naming: core.frontend.structured_values).

Kiln compiles static shapes, so the model is rewritten and compiled once per input *structure* (the
length of each sequence, whether each optional holds a value) as well as per shape."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import onnx
import onnx.helper

from ..errors import ShapeError
from ..frontend.structured_values import element_name, unflatten_sequence


def is_structured_type(type_proto: onnx.TypeProto) -> bool:
    return type_proto.HasField("sequence_type") or type_proto.HasField("optional_type")


def layout_of(type_proto: onnx.TypeProto, value: Any, name: str) -> tuple:
    """A hashable description of a fed value's structure: ("tensor",), ("seq", n) or ("none",)."""
    if type_proto.HasField("optional_type"):
        if value is None:
            return ("none",)
        return layout_of(type_proto.optional_type.elem_type, value, name)
    if type_proto.HasField("sequence_type"):
        if not isinstance(value, (list, tuple)):
            raise ShapeError(f"input {name!r} is a sequence: feed a list of arrays, got {type(value).__name__}")
        return ("seq", len(value))
    if value is None:
        raise ShapeError(f"input {name!r} takes a tensor, got {type(value).__name__}")
    return ("tensor",)


def sequence_input_info(name: str, elements: list) -> onnx.ValueInfoProto:
    """A sequence graph input typed after the given arrays (float when there are none); elements of one
    rank get that rank with symbolic dims, so that ONNX shape inference can type what is computed from it."""
    arrays = [np.asarray(e) for e in elements]
    dtypes = {a.dtype for a in arrays}
    if len(dtypes) > 1:
        raise ShapeError(f"input {name!r}: a sequence holds tensors of one dtype, got {sorted(map(str, dtypes))}")
    elem = onnx.helper.np_dtype_to_tensor_dtype(dtypes.pop()) if dtypes else onnx.TensorProto.FLOAT
    ranks = {a.ndim for a in arrays}
    shape = [f"{name}_d{i}" for i in range(ranks.pop())] if len(ranks) == 1 else None
    return onnx.helper.make_tensor_sequence_value_info(name, elem, shape)


def flat_feeds(name: str, layout: tuple, value: Any) -> dict[str, np.ndarray]:
    if layout[0] == "seq":
        return {element_name(name, i): np.asarray(v) for i, v in enumerate(value)}
    if layout[0] == "tensor":
        return {element_name(name, 0): np.asarray(value)}
    return {}


def flatten_inputs(model: onnx.ModelProto, layouts: Mapping[str, tuple], feeds: Mapping[str, np.ndarray]) -> None:
    """Rewrites `model` in place: each structured input becomes its tensor inputs plus the nodes that
    rebuild it (fed arrays give the tensor inputs their dtypes and static shapes)."""
    inputs = {i.name: i for i in model.graph.input}
    rebuilt: list[onnx.NodeProto] = []
    for name, layout in layouts.items():
        declared = inputs[name].type
        model.graph.input.remove(inputs[name])
        rebuilt.extend(_rebuild(model, name, declared, layout, feeds, name))
    nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(rebuilt + nodes)


def _rebuild(model: onnx.ModelProto, prefix: str, declared: onnx.TypeProto, layout: tuple,
             feeds: Mapping[str, np.ndarray], output: str) -> list[onnx.NodeProto]:
    """Nodes that produce `output` (of type `declared`) from the tensor inputs `prefix::i`."""
    if declared.HasField("optional_type"):
        inner_type = declared.optional_type.elem_type
        if layout[0] == "none":
            return [onnx.helper.make_node("Optional", [], [output], type=inner_type)]
        content = f"{output}::content"
        return _rebuild(model, prefix, inner_type, layout, feeds, content) + \
            [onnx.helper.make_node("Optional", [content], [output])]
    if layout[0] == "tensor":  # the tensor inside an optional
        _add_tensor_input(model, element_name(prefix, 0), declared, feeds)
        return [onnx.helper.make_node("Identity", [element_name(prefix, 0)], [output])]
    elements = [element_name(prefix, i) for i in range(layout[1])]
    elem_type = declared.sequence_type.elem_type
    for element in elements:
        _add_tensor_input(model, element, elem_type, feeds)
    if elements:
        return [onnx.helper.make_node("SequenceConstruct", elements, [output])]
    dtype = elem_type.tensor_type.elem_type or onnx.TensorProto.FLOAT
    return [onnx.helper.make_node("SequenceEmpty", [], [output], dtype=dtype)]


def _add_tensor_input(model: onnx.ModelProto, name: str, declared: onnx.TypeProto,
                      feeds: Mapping[str, np.ndarray]) -> None:
    array = feeds[name]
    elem_type = declared.tensor_type.elem_type if declared.HasField("tensor_type") else 0
    elem_type = elem_type or onnx.helper.np_dtype_to_tensor_dtype(array.dtype)
    model.graph.input.append(onnx.helper.make_tensor_value_info(name, elem_type, array.shape))


def unflatten_output(output: onnx.ValueInfoProto, results: Mapping[str, np.ndarray]) -> Any:
    """The value of ONNX output `output` from the compiled module's flattened results."""
    declared = output.type
    if declared.HasField("optional_type"):
        if declared.optional_type.elem_type.HasField("sequence_type"):
            elements = unflatten_sequence(output.name, results)
            return elements or None  # an optional holding an empty sequence reads back as empty
        return results.get(output.name)
    if declared.HasField("sequence_type") or (output.name not in results and element_name(output.name, 0) in results):
        return unflatten_sequence(output.name, results)
    return results[output.name]
