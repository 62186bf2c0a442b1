"""ONNX backend API (`onnx.backend.base.Backend`) over the real compile pipeline, so that ONNX's own
backend test suite runs against Kiln: `KilnBackend.prepare(model).run([arrays]) -> [arrays]`."""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.shape_inference
from onnx.backend.base import Backend, BackendRep

from .structures import (flat_feeds, flatten_inputs, is_structured_type, layout_of, sequence_input_info,
                                 unflatten_output)
from ..errors import KilnError, ShapeError

_CPU = "CPU"
_REDUCE = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")
# Inputs that set shapes or compile-time parameters (Kiln compiles static shapes). When a graph input
# feeds one of them, the model is specialized on its value at run time: compiled once per value.
_PARAMETER_INPUTS: dict[str, tuple[int, ...]] = {
    **{op: (1,) for op in _REDUCE}, "Pad": (1, 2, 3), "Reshape": (1,), "Slice": (1, 2, 3, 4), "Split": (1,),
    "Clip": (1, 2), "Unsqueeze": (1,), "Squeeze": (1,), "Dropout": (1, 2), "ConstantOfShape": (0,),
    "Range": (0, 1, 2), "Expand": (1,), "Tile": (1,), "TopK": (1,), "OneHot": (1,), "Resize": (1, 2, 3),
    "Upsample": (1,), "Trilu": (1,), "CumSum": (1,), "CumProd": (1,), "CenterCropPad": (1,),
    "NonMaxSuppression": (2, 3, 4),
    # spatial ops
    "AffineGrid": (1,), "Col2Im": (1, 2), "DFT": (1, 2), "STFT": (1, 3), "MaxUnpool": (2,),
    "HannWindow": (0,), "HammingWindow": (0,), "BlackmanWindow": (0,),
    # control flow and sequences: a Loop's trip count, sequence positions and split sizes
    "Loop": (0,), "SequenceInsert": (2,), "SequenceErase": (1,), "SplitToSequence": (1,),
}
# Selectors (conditions, a SequenceAt position): a graph input that feeds one directly, or an integer
# scalar it is computed from (silero VAD's `sr`, a flag), is a parameter; data never is (a selector
# computed from data is applied at run time by the importer instead of compiling once per input value).
_SELECTOR_INPUTS: dict[str, tuple[int, ...]] = {"If": (0,), "Loop": (1,), "SequenceAt": (1,)}
# Ops whose outputs depend only on their input's shape: a shape computed through them does not make
# the tensor itself a compile-time parameter.
_SHAPE_ONLY = {"Shape", "Size"}


def _graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    # Old models list initializers among the inputs too; only the rest are fed at run time.
    initializers = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in initializers]


def _declared_static(value: onnx.ValueInfoProto) -> bool:
    tensor = value.type.tensor_type
    return tensor.HasField("shape") and all(d.HasField("dim_value") for d in tensor.shape.dim)


def _parameter_inputs(model: onnx.ModelProto, inputs: Sequence[str]) -> set[str]:
    """Graph inputs that set a shape or parameter: directly, or through the values computed from them
    (Range's limit from a Sub of inputs, Expand's shape from a Split inside an If branch)."""
    names = set(inputs)
    nodes = list(_all_nodes(model.graph))
    def slots(table: dict[str, tuple[int, ...]]) -> list[str]:
        return [node.input[i] for node in nodes if node.domain in ("", "ai.onnx")
                for i in table.get(node.op_type, ()) if i < len(node.input) and node.input[i]]
    selectors = slots(_SELECTOR_INPUTS)
    scalars = {i.name for i in model.graph.input if _declared_scalar(i)}
    return (set(selectors) | _ancestors(nodes, slots(_PARAMETER_INPUTS)) |
            (_ancestors(nodes, selectors) & scalars)) & names


def _declared_scalar(value: onnx.ValueInfoProto) -> bool:
    """An integer or bool one-element input: a setting (a sample rate, a flag), not data like a float threshold."""
    settings = (onnx.TensorProto.BOOL, onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32,
                onnx.TensorProto.INT64, onnx.TensorProto.UINT8, onnx.TensorProto.UINT16, onnx.TensorProto.UINT32,
                onnx.TensorProto.UINT64)
    tensor = value.type.tensor_type
    return _declared_static(value) and tensor.elem_type in settings and all(d.dim_value == 1 for d in tensor.shape.dim)


def _all_nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for sub in _subgraphs(node):
            yield from _all_nodes(sub)


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    return [g for a in node.attribute for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs)]


def _ancestors(nodes: Sequence[onnx.NodeProto], values: Sequence[str]) -> set[str]:
    """The values these are computed from, not through Shape/Size; a control-flow node's outputs are
    taken to depend on its inputs and on everything its subgraphs read."""
    producer = {out: node for node in nodes for out in node.output}
    seen, stack = set(), list(values)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        node = producer.get(name)
        if node is not None and node.op_type not in _SHAPE_ONLY:
            stack.extend(n for n in node.input if n)
            stack.extend(n for sub in _subgraphs(node) for inner in _all_nodes(sub) for n in inner.input if n)
            stack.extend(o.name for sub in _subgraphs(node) for o in sub.output)
    return seen


class KilnBackendRep(BackendRep):
    """A prepared model: compiled once per input-shape signature (eagerly when every input shape is fixed)."""

    def __init__(self, model: onnx.ModelProto, target: str = "native", opt_level: int = 3):
        self._model = model
        self._data = model.SerializeToString()  # serialized once, not once per shape signature
        self._target, self._opt_level = target, opt_level
        self._inputs = [i.name for i in _graph_inputs(model)]
        self._outputs = [o.name for o in model.graph.output]
        self._output_infos = list(model.graph.output)
        # sequence/optional inputs: flattened into tensor inputs, compiled once per structure (backend_structures)
        self._structured = {i.name: i.type for i in _graph_inputs(model) if is_structured_type(i.type)}
        self._parameters = _parameter_inputs(model, self._inputs)
        # signature -> (artifact, module); the artifact owns the folder the module's library lives in
        self._compiled: dict[tuple, tuple[Any, Any]] = {}
        graph_inputs = _graph_inputs(model)
        if not self._structured and not self._parameters and all(_declared_static(i) for i in graph_inputs):
            self._compile((), self._data, None)  # unsupported ops surface from prepare(), where users expect them

    def _compile(self, key: tuple, data: bytes, shapes: Optional[dict[str, tuple[int, ...]]]):
        from .. import compile as kiln_compile

        if key not in self._compiled:
            artifact = kiln_compile(data, self._target, self._opt_level, None, input_shapes=shapes,
                                    validate=False, benchmark=False)
            self._compiled[key] = (artifact, artifact.load())
        return self._compiled[key][1]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        feeds = self._feeds(inputs)
        if () in self._compiled:
            module = self._compiled[()][1]
        else:
            layouts = {n: layout_of(t, feeds.get(n), n) for n, t in self._structured.items()
                       if n in feeds or t.HasField("optional_type")}  # an optional left out is empty
            for name, layout in layouts.items():
                feeds.update(flat_feeds(name, layout, feeds.pop(name, None)))
            params = {n: np.array(v) for n, v in feeds.items() if n in self._parameters}
            feeds = {n: v for n, v in feeds.items() if n not in self._parameters}
            shapes = {n: tuple(np.shape(v)) for n, v in feeds.items()}
            key = (tuple(sorted(shapes.items())),
                   tuple((n, v.dtype.str, v.shape, v.tobytes()) for n, v in sorted(params.items())),
                   tuple(sorted(layouts.items())))
            module = self._compiled[key][1] if key in self._compiled else \
                self._compile(key, self._specialized(params, layouts, feeds), shapes)
        results = module.run(feeds)
        return tuple(unflatten_output(output, results) for output in self._output_infos)

    def _specialized(self, params: dict[str, np.ndarray], layouts: Optional[dict[str, tuple]] = None,
                     feeds: Optional[dict[str, np.ndarray]] = None) -> bytes:
        """The model with the given inputs turned into initializers (the importer then reads them as
        constants) and its sequence/optional inputs flattened into tensor inputs."""
        if not params and not layouts:
            return self._data
        model = onnx.ModelProto()
        model.CopyFrom(self._model)
        if layouts:
            flatten_inputs(model, layouts, {**(feeds or {}), **params})
        model.graph.initializer.extend(onnx.numpy_helper.from_array(v, n) for n, v in params.items())
        return model.SerializeToString()

    def _feeds(self, inputs: Any) -> dict[str, Any]:
        if isinstance(inputs, dict):
            pairs = list(inputs.items())
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) > len(self._inputs):
                raise ShapeError(f"got {len(inputs)} inputs; the model takes {len(self._inputs)}: {self._inputs}")
            # ONNX lets trailing optional inputs be left out; the compiled model then reports them missing.
            pairs = list(zip(self._inputs, inputs))
        # sequences and optionals stay as fed (lists, None): run() flattens them
        return {name: value if name in self._structured else np.asarray(value) for name, value in pairs}

    def close(self) -> None:
        for artifact, module in self._compiled.values():
            module.close()
            artifact.cleanup()
        self._compiled.clear()


class KilnBackend(Backend):
    """Kiln as an ONNX backend: CPU only (the host), every op compiled to native code."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = _CPU, **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = _CPU, **kwargs: Any) -> KilnBackendRep:
        if not cls.supports_device(device):
            raise KilnError(f"Kiln's ONNX backend runs on CPU only, not {device!r}")
        return KilnBackendRep(model, target=kwargs.get("target", "native"), opt_level=kwargs.get("opt_level", 3))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = _CPU, **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Sequence[np.ndarray], device: str = _CPU,
                 outputs_info: Optional[Sequence[tuple]] = None, **kwargs: Any) -> tuple[np.ndarray, ...]:
        """Wrap one node in a model whose inputs take the given arrays' dtypes and shapes (a list: a sequence)."""
        arrays = [list(a) if isinstance(a, (list, tuple)) else np.asarray(a) for a in inputs]
        names = [n for n in node.input if n]
        graph_inputs = [sequence_input_info(n, a) if isinstance(a, list) else
                        onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                        for n, a in zip(names, arrays)]
        opset = kwargs.pop("opset_version", onnx.defs.onnx_opset_version())
        model = onnx.helper.make_model(onnx.helper.make_graph([node], "run_node", graph_inputs, []),
                                       opset_imports=[onnx.helper.make_opsetid(node.domain or "", opset)])
        # The checker wants typed graph outputs: take them from ONNX's own shape inference of the node.
        inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
        model.graph.output.extend(inferred.get(n) or onnx.helper.make_empty_tensor_value_info(n)
                                  for n in node.output if n)
        return cls.run_model(model, arrays, device, **kwargs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return str(device).upper() == _CPU


prepare = KilnBackend.prepare
run_model = KilnBackend.run_model
run_node = KilnBackend.run_node
supports_device = KilnBackend.supports_device
