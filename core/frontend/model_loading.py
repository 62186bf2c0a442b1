"""Reads an ONNX model (path, bytes or ModelProto) and validates it; external data is read only from
files inside the model's folder (absolute paths, `..` and symlinks out are rejected first), and declared
sizes are held to a budget before anything allocates them."""
from __future__ import annotations

import math
import os
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Iterator, Optional, Union

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from core.errors import InvalidModelError, ModelTooLargeError, UnsupportedOpsetError
from core.narrow_dtypes import packed_nbytes

ModelSource = Union[str, os.PathLike, bytes, bytearray, memoryview, onnx.ModelProto]

# If/Loop/Scan bodies nest graphs in attributes; real models nest a few levels, and walking a hostile
# nesting (protobuf allows ~100) recursively would end in a RecursionError instead of a clear message.
MAX_SUBGRAPH_DEPTH = 16


@dataclass(frozen=True)
class SizeBudget:
    """How large a model may declare its tensors: one tensor, and the weights together."""

    max_tensor_bytes: int = 4 << 30
    max_weights_bytes: int = 8 << 30


DEFAULT_BUDGET = SizeBudget()
# The newest opset of the default ONNX domain the converters follow: a newer one may change what an op
# means, so it is refused rather than compiled as if it were this one.
MAX_OPSET = 28


_LOADED: ContextVar[Optional[dict]] = ContextVar("kiln_loaded_models", default=None)


@contextmanager
def loads_remembered() -> Iterator[None]:
    """Inside: load_model checks a model file once (kiln compile's pre-flight, then the compile's import); each
    later load of the same unchanged file gets a copy of the checked model instead of reading, checking and
    inferring its shapes again."""
    token = _LOADED.set({})
    try:
        yield
    finally:
        _LOADED.reset(token)


def load_model(model: ModelSource, *, allow_external_data: bool = True,
               budget: SizeBudget = DEFAULT_BUDGET) -> onnx.ModelProto:
    """The checked model. `allow_external_data=False` for a single uploaded file, which has no data beside it."""
    remembered = _LOADED.get()
    if remembered is None or not isinstance(model, (str, os.PathLike)):
        return _load_model(model, allow_external_data, budget)
    try:
        st = os.stat(model)
    except OSError:
        return _load_model(model, allow_external_data, budget)  # its own clear error
    key = (os.path.realpath(model), st.st_size, st.st_mtime_ns, allow_external_data, budget)
    if key not in remembered:
        remembered.clear()  # one model at a time
        remembered[key] = _load_model(model, allow_external_data, budget)
    copy = onnx.ModelProto()
    copy.CopyFrom(remembered[key])  # callers may change theirs (the quantizer names nodes)
    return copy


def _load_model(model: ModelSource, allow_external_data: bool, budget: SizeBudget) -> onnx.ModelProto:
    proto, folder = _parse(model)
    check_opsets(proto)
    tensors = list(_tensors(proto.graph))
    check_declared_sizes(tensors, budget)  # from dims alone: nothing is allocated yet
    external = [t for t in tensors if t.data_location == onnx.TensorProto.EXTERNAL]
    if external and not allow_external_data:
        raise InvalidModelError(f"not an ONNX model: tensor {external[0].name!r} keeps its data in an external "
                                "file; upload the model with its data files as a .zip or .tar(.gz) of its folder, "
                                "or save it with its weights inside (onnx.save(model, path, "
                                "save_as_external_data=False))")
    if external and folder is None:
        raise InvalidModelError(f"not an ONNX model: tensor {external[0].name!r} keeps its data in an external "
                                "file, which needs the model to be loaded from its path")
    locations = [_location(folder, t) for t in external]  # rejects escapes before any check opens them
    # The checker reads a path itself (external data included, nothing re-serialized); shape inference
    # does not need the weights, so both run before the (possibly large) external data is read.
    moved = adopt_runtime_ops(proto)
    _check(Path(model) if isinstance(model, (str, os.PathLike)) and not moved else proto)
    check_inferred_sizes(_infer_shapes(proto), budget)
    for tensor, location in zip(external, locations):
        _read_external_data(tensor, location)
    return proto


def check_opsets(proto: onnx.ModelProto) -> None:
    """UnsupportedOpsetError when the model imports a default-domain opset newer than MAX_OPSET."""
    for entry in proto.opset_import:
        if entry.domain in ("", "ai.onnx") and entry.version > MAX_OPSET:
            raise UnsupportedOpsetError(
                f"the model uses ONNX opset {entry.version}, newer than the newest Kiln supports ({MAX_OPSET}): "
                f"export it with opset_version={MAX_OPSET} or lower, or convert it with "
                f"onnx.version_converter.convert_version(model, {MAX_OPSET})")


# Contrib ops ONNX Runtime registers in the ONNX domain itself (its transformer optimizer writes them
# there): ONNX has no schema for them, so they are read as the com.microsoft ops they are.
RUNTIME_OPS_IN_ONNX_DOMAIN = frozenset({"SimplifiedLayerNormalization"})
RUNTIME_DOMAIN = "com.microsoft"


def adopt_runtime_ops(proto: onnx.ModelProto) -> bool:
    """Moves RUNTIME_OPS_IN_ONNX_DOMAIN nodes (subgraphs included) to ONNX Runtime's domain; True if any moved."""
    moved = False
    graphs = [proto.graph]
    while graphs:
        graph = graphs.pop()
        for node in graph.node:
            if node.domain in ("", "ai.onnx") and node.op_type in RUNTIME_OPS_IN_ONNX_DOMAIN:
                node.domain, moved = RUNTIME_DOMAIN, True
            for attribute in node.attribute:
                graphs.extend([attribute.g] if attribute.HasField("g") else [])
                graphs.extend(attribute.graphs)
    if moved and not any(o.domain == RUNTIME_DOMAIN for o in proto.opset_import):
        proto.opset_import.append(onnx.helper.make_opsetid(RUNTIME_DOMAIN, 1))
    return moved


def _itemsize(data_type: int) -> int:
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(data_type).itemsize
    except (KeyError, TypeError, ValueError):
        return 8  # unknown or string types: the checker rejects what it must; count them generously


def _too_large(what: str, nbytes: int, limit: int) -> ModelTooLargeError:
    return ModelTooLargeError(f"model too large: {what} would need {nbytes:,} bytes, over the limit of "
                              f"{limit:,} bytes per tensor")


def check_declared_sizes(tensors: list[onnx.TensorProto], budget: SizeBudget) -> None:
    """Initializers and constant attributes by their declared dims (Python ints: no overflow)."""
    total = 0
    for tensor in tensors:
        if any(d < 0 for d in tensor.dims):
            raise InvalidModelError(f"not an ONNX model: tensor {tensor.name!r} declares negative dims {list(tensor.dims)}")
        nbytes = math.prod(tensor.dims) * _itemsize(tensor.data_type)
        if nbytes > budget.max_tensor_bytes:
            raise _too_large(f"tensor {tensor.name!r} {list(tensor.dims)}", nbytes, budget.max_tensor_bytes)
        total += nbytes
    if total > budget.max_weights_bytes:
        raise ModelTooLargeError(f"model too large: its weights declare {total:,} bytes, over the limit of "
                                 f"{budget.max_weights_bytes:,} bytes")


def check_inferred_sizes(proto: onnx.ModelProto, budget: SizeBudget) -> None:
    """Every value whose shape ONNX inferred (ConstantOfShape, Expand, Tile, Range, Resize of constants)."""
    graph = proto.graph
    for value in [*graph.value_info, *graph.output]:
        tensor = value.type.tensor_type
        if not tensor.HasField("shape") or not all(d.HasField("dim_value") and d.dim_value >= 0
                                                      for d in tensor.shape.dim):
            continue  # symbolic: sized once the compile fixes its input shapes
        nbytes = math.prod(d.dim_value for d in tensor.shape.dim) * _itemsize(tensor.elem_type)
        if nbytes > budget.max_tensor_bytes:
            raise _too_large(f"value {value.name!r} {[d.dim_value for d in tensor.shape.dim]}", nbytes,
                             budget.max_tensor_bytes)


def _parse(model: ModelSource) -> tuple[onnx.ModelProto, Path | None]:
    if isinstance(model, onnx.ModelProto):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)  # external data is filled in below; never touch the caller's proto
        return copy, None
    if isinstance(model, (bytes, bytearray, memoryview)):
        return _decode(bytes(model)), None
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        try:
            data = path.read_bytes()
        except OSError as err:
            raise InvalidModelError(f"not an ONNX model: cannot read {str(path)!r} ({err.strerror or err})") from None
        return _decode(data), path.absolute().parent
    raise TypeError(f"model must be a path, bytes or onnx.ModelProto, not {type(model).__name__}")


class SerializedModel(bytes):
    """A model file's bytes, and the folder its external data files lie in (`folder`: where their relative
    locations resolve; None for a model given as bytes or a ModelProto, which carries its weights inside)."""

    folder: Path | None = None

    def sharing_folder(self, data: bytes) -> bytes:
        """Other bytes of the same model (a changed copy) that resolve external data in this folder."""
        copy = SerializedModel(data)
        copy.folder = self.folder
        return copy


def serialized_model(model: ModelSource) -> bytes:
    """The model's bytes for a reference runtime; a path keeps its external data where it is (never re-serialized:
    a model over protobuf's 2 GB limit exists only as a graph file plus data files)."""
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        try:
            out = SerializedModel(path.read_bytes())
        except OSError as err:
            raise InvalidModelError(f"not an ONNX model: cannot read {str(path)!r} ({err.strerror or err})") from None
        out.folder = path.absolute().parent
        return out
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    try:
        return model.SerializeToString()
    except ValueError as err:  # protobuf refuses a message over 2 GB
        raise ModelTooLargeError(f"model too large to pass in memory ({_first_line(err)}): save it with its weights "
                                 "as external data (onnx.save(model, 'model.onnx', save_as_external_data=True)) "
                                 "and compile the path") from None


def _decode(data: bytes) -> onnx.ModelProto:
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as err:
        raise InvalidModelError(f"not an ONNX model: the file is not an ONNX protobuf ({err})") from None
    # Arbitrary bytes sometimes parse as a protobuf with only unknown fields.
    if not proto.HasField("graph") or not proto.opset_import:
        raise InvalidModelError("not an ONNX model: no graph or opset_import found")
    return proto


def _sparse(sparse: onnx.SparseTensorProto) -> Iterator[onnx.TensorProto]:
    yield sparse.values
    yield sparse.indices


def _tensors(graph: onnx.GraphProto, depth: int = 0) -> Iterator[onnx.TensorProto]:
    """Every tensor a graph carries: initializers, sparse ones, attributes, and those of its subgraphs."""
    if depth > MAX_SUBGRAPH_DEPTH:
        raise InvalidModelError(f"not an ONNX model: subgraphs nested more than {MAX_SUBGRAPH_DEPTH} levels deep")
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield from _sparse(sparse)
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            if attribute.HasField("sparse_tensor"):
                yield from _sparse(attribute.sparse_tensor)
            for sparse in attribute.sparse_tensors:
                yield from _sparse(sparse)
            if attribute.HasField("g"):
                yield from _tensors(attribute.g, depth + 1)
            for subgraph in attribute.graphs:
                yield from _tensors(subgraph, depth + 1)


def safe_external_path(folder: Path, location: str) -> Path:
    """The file `location` names inside `folder`, or InvalidModelError if it would leave the folder."""
    unsafe = (not location or "\x00" in location or PurePosixPath(location).is_absolute()
              or PureWindowsPath(location).is_absolute() or PureWindowsPath(location).drive
              or ".." in PurePosixPath(location.replace("\\", "/")).parts)
    root = folder.resolve()
    target = (root / location).resolve() if not unsafe else root
    if unsafe or not target.is_relative_to(root) or target == root:
        raise InvalidModelError(f"not an ONNX model: external data location {location!r} escapes the model's folder")
    return target


def _location(folder: Path, tensor: onnx.TensorProto) -> Path:
    info = {entry.key: entry.value for entry in tensor.external_data}
    return safe_external_path(folder, info.get("location", ""))


def _read_external_data(tensor: onnx.TensorProto, path: Path) -> None:
    info = {entry.key: entry.value for entry in tensor.external_data}
    try:
        offset, length = int(info.get("offset", 0)), int(info["length"]) if "length" in info else -1
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).name
    except (ValueError, KeyError, TypeError) as err:
        raise InvalidModelError(f"not an ONNX model: bad external data entry for {tensor.name!r} ({err})") from None
    expected = packed_nbytes(dtype, int(np.prod(tensor.dims, dtype=np.int64)))  # int4/int2/float4 are packed
    if offset < 0 or (length >= 0 and length != expected):
        raise InvalidModelError(f"not an ONNX model: external data of {tensor.name!r} declares {length} bytes "
                                f"at offset {offset}, its shape needs {expected}")
    try:
        # Compare with the file size first so that an absurd declared shape never allocates.
        if path.stat().st_size < offset + expected:
            raise InvalidModelError(f"not an ONNX model: external data {path.name!r} is too short for {tensor.name!r}")
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read(expected)
    except OSError as err:
        raise InvalidModelError(f"not an ONNX model: cannot read external data {path.name!r} "
                                f"({err.strerror})") from None
    if len(data) != expected:
        raise InvalidModelError(f"not an ONNX model: external data {path.name!r} is too short for {tensor.name!r}")
    tensor.raw_data = data
    del tensor.external_data[:]
    tensor.data_location = onnx.TensorProto.DEFAULT


def _check(source: onnx.ModelProto | Path) -> None:
    try:
        onnx.checker.check_model(str(source) if isinstance(source, Path) else source)
    except (onnx.checker.ValidationError, ValueError, OSError) as err:
        raise InvalidModelError(f"not an ONNX model: it fails the ONNX checker: {_first_line(err)}") from None


# Float initializers of at least this many elements go to shape inference without their values: inference reads the
# values of shape-like inputs only (int64 shapes, a Resize's few float scales), and passing a large model's weights
# costs four copies of them (serialized, parsed by ONNX, serialized back, parsed again: ~0.3 s for resnet18's 45 MB).
_VALUES_NOT_INFERRED = 1024
_FLOAT_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
                          onnx.TensorProto.DOUBLE})


def _without_weight_values(proto: onnx.ModelProto) -> onnx.ModelProto:
    """`proto` with its large float initializers' values dropped (types and dims kept), or `proto` itself when it has
    none; the caller's proto is never changed."""
    large = [k for k, t in enumerate(proto.graph.initializer) if t.data_type in _FLOAT_TYPES and t.HasField("raw_data")
             and math.prod(t.dims) >= _VALUES_NOT_INFERRED]
    if not large:
        return proto
    light = onnx.ModelProto()
    light.CopyFrom(proto)
    for k in large:
        tensor = light.graph.initializer[k]
        tensor.ClearField("raw_data")
        tensor.data_location = onnx.TensorProto.EXTERNAL  # values elsewhere: inference reads types and dims only
        del tensor.external_data[:]
        tensor.external_data.add(key="location", value="not-read-by-shape-inference")
    return light


def _infer_shapes(proto: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(_without_weight_values(proto), check_type=True, strict_mode=True)
    except (onnx.shape_inference.InferenceError, ValueError) as err:
        raise InvalidModelError(f"not an ONNX model: ONNX shape inference rejects it: {_first_line(err)}") from None


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
