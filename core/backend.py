"""ONNX backend API (`onnx.backend.base.Backend`) over the real compile pipeline, so that ONNX's own
backend test suite runs against Kiln: `KilnBackend.prepare(model).run([arrays]) -> [arrays]`."""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
import onnx
import onnx.numpy_helper
import onnx.shape_inference
from onnx.backend.base import Backend, BackendRep

from .errors import KilnError, ShapeError

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
}


def _graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    # Old models list initializers among the inputs too; only the rest are fed at run time.
    initializers = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in initializers]


def _declared_static(value: onnx.ValueInfoProto) -> bool:
    tensor = value.type.tensor_type
    return tensor.HasField("shape") and all(d.HasField("dim_value") for d in tensor.shape.dim)


def _parameter_inputs(model: onnx.ModelProto, inputs: Sequence[str]) -> set[str]:
    names = set(inputs)
    return {node.input[i] for node in model.graph.node if node.domain in ("", "ai.onnx")
            for i in _PARAMETER_INPUTS.get(node.op_type, ()) if i < len(node.input) and node.input[i] in names}


class KilnBackendRep(BackendRep):
    """A prepared model: compiled once per input-shape signature (eagerly when every input shape is fixed)."""

    def __init__(self, model: onnx.ModelProto, target: str = "native", opt_level: int = 3):
        self._model = model
        self._data = model.SerializeToString()  # serialized once, not once per shape signature
        self._target, self._opt_level = target, opt_level
        self._inputs = [i.name for i in _graph_inputs(model)]
        self._outputs = [o.name for o in model.graph.output]
        self._parameters = _parameter_inputs(model, self._inputs)
        # signature -> (artifact, module); the artifact owns the folder the module's library lives in
        self._compiled: dict[tuple, tuple[Any, Any]] = {}
        graph_inputs = _graph_inputs(model)
        # Non-tensor inputs (sequences, optionals) compile at once too: the importer's typed error says why not.
        if any(not i.type.HasField("tensor_type") for i in graph_inputs) or \
                (not self._parameters and all(_declared_static(i) for i in graph_inputs)):
            self._compile((), self._data, None)  # unsupported ops surface from prepare(), where users expect them

    def _compile(self, key: tuple, data: bytes, shapes: Optional[dict[str, tuple[int, ...]]]):
        from . import compile as kiln_compile

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
            params = {n: np.array(v) for n, v in feeds.items() if n in self._parameters}
            feeds = {n: v for n, v in feeds.items() if n not in self._parameters}
            shapes = {n: tuple(np.shape(v)) for n, v in feeds.items()}
            key = (tuple(sorted(shapes.items())),
                   tuple((n, v.dtype.str, v.shape, v.tobytes()) for n, v in sorted(params.items())))
            module = self._compiled[key][1] if key in self._compiled else \
                self._compile(key, self._specialized(params), shapes)
        results = module.run(feeds)
        return tuple(results[name] for name in self._outputs)

    def _specialized(self, params: dict[str, np.ndarray]) -> bytes:
        """The model with the given inputs turned into initializers (the importer then reads them as constants)."""
        if not params:
            return self._data
        model = onnx.ModelProto()
        model.CopyFrom(self._model)
        model.graph.initializer.extend(onnx.numpy_helper.from_array(v, n) for n, v in params.items())
        return model.SerializeToString()

    def _feeds(self, inputs: Any) -> dict[str, np.ndarray]:
        if isinstance(inputs, dict):
            return {name: np.asarray(value) for name, value in inputs.items()}
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        inputs = list(inputs)
        if len(inputs) > len(self._inputs):
            raise ShapeError(f"got {len(inputs)} inputs; the model takes {len(self._inputs)}: {self._inputs}")
        # ONNX lets trailing optional inputs be left out; the compiled model then reports them missing.
        return {name: np.asarray(value) for name, value in zip(self._inputs, inputs)}

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
        """Wrap one node in a model whose inputs take the given arrays' dtypes and shapes."""
        arrays = [np.asarray(a) for a in inputs]
        names = [n for n in node.input if n]
        graph_inputs = [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
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
