"""Small 3-D models built with onnx.helper for the ConvND tests: a 3-D U-Net (medical imaging) and
an r3d-style video ResNet (torchvision's r3d_18 stem, basic and downsampling blocks, head)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class ModelBuilder:
    """Nodes and initializers of one graph; each helper returns its output's name."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def _name(self, base: str) -> str:
        return f"{base}{len(self.nodes)}_{len(self.inits)}"

    def const(self, value: np.ndarray, base: str = "c") -> str:
        name = self._name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = self._name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, kernel, bias: bool = True, **attrs) -> str:
        fan_in = cin // attrs.get("group", 1) * int(np.prod(kernel))
        w = (self.rng.standard_normal((cout, cin // attrs.get("group", 1), *kernel)) / np.sqrt(fan_in))
        inputs = [x, self.const(w.astype(np.float32), "w")]
        if bias:
            inputs.append(self.const((self.rng.standard_normal(cout) * 0.1).astype(np.float32), "b"))
        return self.node("Conv", inputs, **attrs)

    def bn(self, x: str, c: int) -> str:
        scale, shift = 1 + 0.1 * self.rng.standard_normal(c), 0.1 * self.rng.standard_normal(c)
        mean, var = 0.1 * self.rng.standard_normal(c), 1 + 0.2 * self.rng.random(c)
        return self.node("BatchNormalization", [x] + [self.const(v.astype(np.float32), "bn")
                                                      for v in (scale, shift, mean, var)])

    def model(self, inputs: dict[str, tuple], output: str, opset: int = 17) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "model", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                                        for n, s in inputs.items()],
                                  [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        del model.graph.output[:]
        model.graph.output.extend(inferred.graph.output)
        return model


def unet3d(shape=(1, 2, 8, 16, 16), width: int = 8, classes: int = 3) -> onnx.ModelProto:
    """Two-level 3-D U-Net: conv-BN-ReLU pairs, max-pool down, transposed-conv up, skip concat, softmax."""
    b = ModelBuilder(1)
    pad = {"pads": [1] * 6}

    def double(x, cin, cout):
        x = b.node("Relu", [b.bn(b.conv(x, cin, cout, (3, 3, 3), **pad), cout)])
        return b.node("Relu", [b.bn(b.conv(x, cout, cout, (3, 3, 3), **pad), cout)])

    skip = double("x", shape[1], width)
    down = b.node("MaxPool", [skip], kernel_shape=[2, 2, 2], strides=[2, 2, 2])
    mid = double(down, width, 2 * width)
    w_up = (b.rng.standard_normal((2 * width, width, 2, 2, 2)) * 0.2).astype(np.float32)
    up = b.node("ConvTranspose", [mid, b.const(w_up, "wup")], strides=[2, 2, 2])
    x = double(b.node("Concat", [skip, up], axis=1), 2 * width, width)
    logits = b.conv(x, width, classes, (1, 1, 1))
    return b.model({"x": shape}, b.node("Softmax", [logits], axis=1))


def r3d_block_net(shape=(1, 3, 4, 32, 32), width: int = 16, classes: int = 10) -> onnx.ModelProto:
    """torchvision r3d_18 in miniature: stem (3x7x7, stride 1x2x2), a basic block, a downsampling block
    (strided 3x3x3 with a strided 1x1x1 shortcut), an average-pooled linear head."""
    b = ModelBuilder(2)

    def conv_bn(x, cin, cout, kernel, stride, pads):
        return b.bn(b.conv(x, cin, cout, kernel, bias=False, strides=stride, pads=pads), cout)

    x = b.node("Relu", [conv_bn("x", shape[1], width, (3, 7, 7), [1, 2, 2], [1, 3, 3, 1, 3, 3])])
    y = b.node("Relu", [conv_bn(x, width, width, (3, 3, 3), [1, 1, 1], [1] * 6)])
    x = b.node("Relu", [b.node("Add", [conv_bn(y, width, width, (3, 3, 3), [1, 1, 1], [1] * 6), x])])
    y = b.node("Relu", [conv_bn(x, width, 2 * width, (3, 3, 3), [2, 2, 2], [1] * 6)])
    y = conv_bn(y, 2 * width, 2 * width, (3, 3, 3), [1, 1, 1], [1] * 6)
    shortcut = conv_bn(x, width, 2 * width, (1, 1, 1), [2, 2, 2], [0] * 6)
    x = b.node("Relu", [b.node("Add", [y, shortcut])])
    pooled = b.node("Flatten", [b.node("GlobalAveragePool", [x])])
    fc = (b.rng.standard_normal((classes, 2 * width)) * 0.2).astype(np.float32)
    out = b.node("Gemm", [pooled, b.const(fc, "fc"), b.const(np.zeros(classes, np.float32), "fcb")], transB=1)
    return b.model({"x": shape}, out)
