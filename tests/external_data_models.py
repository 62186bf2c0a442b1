"""A small model saved with every tensor as external data (size_threshold=0), for the compile, CLI and API tests."""
from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def save_external_mlp(folder: Path, location: str = "mlp.onnx.data", name: str = "mlp.onnx") -> Path:
    """MatMul -> Add -> Relu -> MatMul, its three weights in one data file `location` beside `name`."""
    rng = np.random.default_rng(34)
    weights = {"w1": rng.standard_normal((32, 64)).astype(np.float32), "b1": rng.standard_normal(64).astype(np.float32),
               "w2": rng.standard_normal((64, 8)).astype(np.float32)}
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
         helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(a, n) for n, a in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (folder / location).parent.mkdir(parents=True, exist_ok=True)
    path = folder / name
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=location,
              size_threshold=0)
    assert all(t.data_location == TensorProto.EXTERNAL for t in onnx.load(str(path), load_external_data=False)
               .graph.initializer)
    return path


def zipped(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def tarred(files: dict[str, bytes], links: dict[str, str] | None = None, mode: str = "w:gz") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            archive.addfile(info)
    return buffer.getvalue()


def folder_files(path: Path, prefix: str = "") -> dict[str, bytes]:
    """The model file and its data files as archive members under `prefix`."""
    return {prefix + p.relative_to(path.parent).as_posix(): p.read_bytes() for p in sorted(path.parent.rglob("*"))
            if p.is_file()}
