"""Small float CNNs built with onnx.helper and quantized by ONNX Runtime's quantize_static (QDQ or QOperator
form), and the quantized tolerance used to compare Kiln with ONNX Runtime on them."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

INPUT_SHAPE = (1, 3, 16, 16)


def _weights(rng, shape, scale):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def residual_cnn(seed: int = 0) -> onnx.ModelProto:
    """Conv+Relu, MaxPool, a residual Add, Flatten and a Gemm (transB): resnet's pieces."""
    rng = np.random.default_rng(seed)
    inits = dict(w1=_weights(rng, (8, 3, 3, 3), 0.3), b1=_weights(rng, (8,), 0.1), w2=_weights(rng, (8, 8, 3, 3), 0.2),
                 b2=_weights(rng, (8,), 0.1), wf=_weights(rng, (10, 128), 0.1), bf=_weights(rng, (10,), 0.1))
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Add", ["r2", "p1"], ["s"]),
             helper.make_node("MaxPool", ["s"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p2"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1)]
    return _model(nodes, inits, (1, 10))


def branchy_cnn(seed: int = 1) -> onnx.ModelProto:
    """Strided and depthwise convs, Concat, AveragePool, Sigmoid gating (Mul), GlobalAveragePool and a MatMul:
    squeezenet's and mobilenet's pieces."""
    rng = np.random.default_rng(seed)
    inits = dict(w1=_weights(rng, (8, 3, 3, 3), 0.3), b1=_weights(rng, (8,), 0.1), wd=_weights(rng, (8, 1, 3, 3), 0.3),
                 w3=_weights(rng, (8, 8, 1, 1), 0.3), wm=_weights(rng, (16, 6), 0.2))
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "wd"], ["d"], pads=[1, 1, 1, 1], group=8),
             helper.make_node("Clip", ["d", "lo", "hi"], ["d6"]),
             helper.make_node("Conv", ["r1", "w3"], ["e"]),
             helper.make_node("Concat", ["d6", "e"], ["cat"], axis=1),
             helper.make_node("AveragePool", ["cat"], ["ap"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Sigmoid", ["ap"], ["sg"]),
             helper.make_node("Mul", ["ap", "sg"], ["sw"]),
             helper.make_node("GlobalAveragePool", ["sw"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("MatMul", ["f", "wm"], ["y"])]
    inits.update(lo=np.array(0, np.float32), hi=np.array(6, np.float32))
    return _model(nodes, inits, (1, 6))


def temporal_cnn(seed: int = 2) -> onnx.ModelProto:
    """1-D convs (padded, dilated, strided), LeakyRelu, a residual Add and a Gemm: an audio/sequence model's pieces."""
    rng = np.random.default_rng(seed)
    inits = dict(w1=_weights(rng, (8, 4, 3), 0.3), b1=_weights(rng, (8,), 0.1), w2=_weights(rng, (8, 8, 3), 0.2),
                 w3=_weights(rng, (6, 8, 1), 0.3), wf=_weights(rng, (5, 96), 0.1), bf=_weights(rng, (5,), 0.1))
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[2, 2], dilations=[2]),
             helper.make_node("LeakyRelu", ["c2"], ["l2"], alpha=0.1),
             helper.make_node("Add", ["l2", "r1"], ["s"]),
             helper.make_node("Conv", ["s", "w3"], ["c3"], strides=[2]),
             helper.make_node("Flatten", ["c3"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1)]
    return _model(nodes, inits, (1, 5), (1, 4, 32))


def input_shape(model: onnx.ModelProto) -> tuple[int, ...]:
    return tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)


def _model(nodes, inits, out_shape, in_shape=INPUT_SHAPE) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))],
                              [numpy_helper.from_array(v, n) for n, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def quantize(model: onnx.ModelProto, folder: Path, per_channel: bool, activations: str, operator_form: bool = False,
             samples: int = 8, seed: int = 3) -> Path:
    """`model` quantized by onnxruntime.quantization.quantize_static on seeded random calibration inputs; int8
    weights, `activations` "uint8" or "int8"."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(seed)
            self.batches = iter([{"x": rng.standard_normal(input_shape(model)).astype(np.float32)}
                                 for _ in range(samples)])

        def get_next(self):
            return next(self.batches, None)

    source, target = folder / "float.onnx", folder / "quantized.onnx"
    onnx.save(model, source)
    quantize_static(str(source), str(target), Reader(),
                    quant_format=QuantFormat.QOperator if operator_form else QuantFormat.QDQ, per_channel=per_channel,
                    activation_type=QuantType.QUInt8 if activations == "uint8" else QuantType.QInt8,
                    weight_type=QuantType.QInt8)
    return target


def output_step(model: onnx.ModelProto, output: str) -> float:
    """The quantization step of a float output produced by a DequantizeLinear (its scale)."""
    node = next(n for n in model.graph.node if output in n.output)
    assert node.op_type == "DequantizeLinear", f"{output} comes from {node.op_type}"
    scales = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return float(scales[node.input[1]])


def assert_within_one_step(ours: np.ndarray, theirs: np.ndarray, step: float, share: float = 0.999) -> None:
    """The quantized tolerance: at most one quantization step apart on at least `share` of the elements, and
    never more than two."""
    distance = np.abs(ours.astype(np.float64) - theirs.astype(np.float64)) / step
    assert distance.max() <= 2 + 1e-3, f"{distance.max():.2f} steps apart"
    assert np.mean(distance <= 1 + 1e-3) >= share, f"{np.mean(distance > 1 + 1e-3):.2%} of elements > 1 step apart"
