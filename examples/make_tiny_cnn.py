"""Writes examples/tiny_cnn.onnx, the small model the README's examples compile (a clone has no other model)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save


def tiny_cnn() -> "onnx.ModelProto":  # noqa: F821 - onnx's type, named for the reader
    """image[1,3,32,32] -> Conv 3x3 (16) -> Relu -> MaxPool 2x2 -> Conv 3x3 (16) -> Relu -> GlobalAveragePool -> Flatten
    -> Gemm (10) -> Softmax: class probabilities."""
    rng = np.random.default_rng(0)

    def init(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["m1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["m1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "w3", "b3"], ["logits"], transB=1),
             helper.make_node("Softmax", ["logits"], ["scores"], axis=1)]
    graph = helper.make_graph(nodes, "tiny_cnn", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 10])],
                              [init("w1", 16, 3, 3, 3), init("b1", 16), init("w2", 16, 16, 3, 3), init("b2", 16),
                               init("w3", 10, 16), init("b3", 10)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


if __name__ == "__main__":
    save(tiny_cnn(), Path(__file__).with_name("tiny_cnn.onnx"))
