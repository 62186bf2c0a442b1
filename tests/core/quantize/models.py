"""A small float32 CNN built with onnx.helper, and calibration .npz files for it (shared by the quantize tests)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

INPUT = "image"
SHAPE = (1, 3, 12, 12)
CLASSES = 10


def small_cnn(seed: int = 0, named: bool = True) -> onnx.ModelProto:
    """image[1,3,12,12] -> Conv 3x3 (8) -> Relu -> Conv 3x3 (8) -> Relu -> GlobalAveragePool -> Flatten -> Gemm (10)."""
    rng = np.random.default_rng(seed)

    def init(name, *shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [init("w1", 8, 3, 3, 3), init("b1", 8, scale=0.1), init("w2", 8, 8, 3, 3, scale=0.2),
             init("b2", 8, scale=0.1), init("w3", CLASSES, 8, scale=0.5), init("b3", CLASSES, scale=0.1)]
    nodes = [helper.make_node("Conv", [INPUT, "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "w3", "b3"], ["scores"], transB=1)]
    if named:
        for node, name in zip(nodes, ["conv1", "relu1", "conv2", "relu2", "pool", "flatten", "fc"]):
            node.name = name
    graph = helper.make_graph(nodes, "small_cnn", [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("scores", TensorProto.FLOAT, (1, CLASSES))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def calibration_samples(count: int = 20, seed: int = 1) -> np.ndarray:
    """`count` samples of the CNN's input, stacked on a leading axis: smooth images with some noise."""
    rng = np.random.default_rng(seed)
    ys, xs = np.mgrid[0:SHAPE[2], 0:SHAPE[3]] / SHAPE[2]
    out = []
    for _ in range(count):
        freq = rng.uniform(0.5, 3.0, size=(3, 1, 1))
        image = np.sin(freq * (xs + rng.uniform(0, 1)) * 6) * np.cos(freq * ys * 4) + 0.1 * rng.standard_normal((3, *SHAPE[2:]))
        out.append(image[None].astype(np.float32))
    return np.stack(out)


def write_model(folder: Path, model: onnx.ModelProto | None = None, name: str = "cnn.onnx") -> Path:
    path = folder / name
    onnx.save_model(model or small_cnn(), str(path))
    return path


def write_calibration(folder: Path, count: int = 20, name: str = "calibration.npz", **arrays) -> Path:
    path = folder / name
    np.savez(path, **(arrays or {INPUT: calibration_samples(count)}))
    return path
