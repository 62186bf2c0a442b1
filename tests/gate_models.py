"""A model whose -O0 build is clearly slower than its -O3 one, for the CI gate's tests: twelve element-wise ops on a
2 MiB tensor are one fused kernel at -O3 and twelve passes over memory at -O0 (measured 2.1x-3.7x on 2 cores)."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def elementwise_chain(shape=(1, 32, 128, 128), ops: int = 12) -> bytes:
    nodes, constants, previous = [], [], "x"
    for i in range(ops):
        kind = ("Add", "Mul", "Relu")[i % 3]
        output = "y" if i == ops - 1 else f"t{i}"
        if kind == "Relu":
            nodes.append(helper.make_node("Relu", [previous], [output]))
        else:
            constants.append(numpy_helper.from_array(np.array(0.5 + 0.1 * i, np.float32), f"k{i}"))
            nodes.append(helper.make_node(kind, [previous, f"k{i}"], [output]))
        previous = output
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))], constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()
