"""Reads an ONNX model (path, bytes or ModelProto) and validates it; external data is read only from
files inside the model's folder (absolute paths, `..` and symlinks out are rejected first)."""
from __future__ import annotations

import os
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Iterator, Union

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from core.errors import InvalidModelError

ModelSource = Union[str, os.PathLike, bytes, bytearray, memoryview, onnx.ModelProto]


def load_model(model: ModelSource) -> onnx.ModelProto:
    proto, folder = _parse(model)
    external = [t for t in _tensors(proto.graph) if t.data_location == onnx.TensorProto.EXTERNAL]
    if external and folder is None:
        raise InvalidModelError(f"not an ONNX model: tensor {external[0].name!r} keeps its data in an external "
                                "file, which needs the model to be loaded from its path")
    locations = [_location(folder, t) for t in external]  # rejects escapes before any check opens them
    # The checker reads a path itself (external data included, nothing re-serialized); shape inference
    # does not need the weights, so both run before the (possibly large) external data is read.
    _check(Path(model) if isinstance(model, (str, os.PathLike)) else proto)
    _infer_shapes(proto)
    for tensor, location in zip(external, locations):
        _read_external_data(tensor, location)
    return proto


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


def _tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            if attribute.HasField("g"):
                yield from _tensors(attribute.g)
            for subgraph in attribute.graphs:
                yield from _tensors(subgraph)


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
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except (ValueError, KeyError, TypeError) as err:
        raise InvalidModelError(f"not an ONNX model: bad external data entry for {tensor.name!r} ({err})") from None
    expected = int(np.prod(tensor.dims, dtype=np.int64)) * itemsize
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


def _infer_shapes(proto: onnx.ModelProto) -> None:
    try:
        onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
    except (onnx.shape_inference.InferenceError, ValueError) as err:
        raise InvalidModelError(f"not an ONNX model: ONNX shape inference rejects it: {_first_line(err)}") from None


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
