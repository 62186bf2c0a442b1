"""Small ONNX files built to hurt: absurd declared sizes, external data that escapes, deep nesting.

Each builder returns serialized bytes (what an upload carries); none of them is larger than a few KiB.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

HUGE = 10**12  # elements: 4 TB of float32


def _model(nodes, inputs, outputs, initializers=(), opset: int = 17, sparse=()) -> bytes:
    graph = helper.make_graph(nodes, "hostile", inputs, outputs, list(initializers), sparse_initializer=list(sparse))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model.SerializeToString()


def _declared(name: str, dims) -> TensorProto:
    """A float tensor that declares `dims` and carries no data (onnx.helper would refuse to build it)."""
    tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(dims))
    tensor.raw_data = b""
    return tensor


def _ints(name: str, values) -> TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)


def _out(name: str = "y", rank: int = 1, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, [f"d{i}" for i in range(rank)])


def _in(name: str = "x", shape=(1, 4)):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def constant_of_shape_huge() -> bytes:
    return _model([helper.make_node("ConstantOfShape", ["s"], ["y"])], [], [_out()], [_ints("s", [HUGE])])


def constant_of_shape_from_constant_node() -> bytes:
    shape = helper.make_node("Constant", [], ["s"], value=_ints("v", [10**6, 10**6]))
    return _model([shape, helper.make_node("ConstantOfShape", ["s"], ["y"])], [], [_out(rank=2)])


def expand_huge() -> bytes:
    return _model([helper.make_node("Expand", ["x", "s"], ["y"])], [_in(shape=(1, 1))], [_out(rank=2)],
                  [_ints("s", [10**6, 10**6])])


def tile_huge() -> bytes:
    return _model([helper.make_node("Tile", ["x", "r"], ["y"])], [_in()], [_out(rank=2)], [_ints("r", [10**6, 10**6])])


def range_huge() -> bytes:
    scalars = [numpy_helper.from_array(np.asarray(v, dtype=np.float32), n)
               for n, v in (("start", 0.0), ("limit", 1e13), ("delta", 1.0))]
    return _model([helper.make_node("Range", ["start", "limit", "delta"], ["y"])], [], [_out()], scalars)


def resize_huge() -> bytes:
    sizes = _ints("sizes", [1, 1, 10**6, 10**6])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])
    return _model([helper.make_node("Resize", ["x", "", "", "sizes"], ["y"])], [x], [_out(rank=4)], [sizes])


def expand_from_shape_huge() -> bytes:
    """Expand to a shape computed from the input's Shape: ONNX cannot size it from the file, Kiln can."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Mul", ["s", "k"], ["big"]),
             helper.make_node("Expand", ["x", "big"], ["y"])]
    return _model(nodes, [_in(shape=(1, 1000))], [_out(rank=2)], [_ints("k", [10**7, 1])])


def huge_initializer_declared() -> bytes:
    """An initializer whose dims promise 4 TB but that carries no data at all."""
    weight = _declared("w", [10**6, 10**6])
    return _model([helper.make_node("Add", ["x", "w"], ["y"])], [_in()], [_out(rank=2)], [weight])


def negative_dims_initializer() -> bytes:
    weight = _declared("w", [-4, 4])
    return _model([helper.make_node("Add", ["x", "w"], ["y"])], [_in()], [_out(rank=2)], [weight])


def _external(name: str, location: str, dims=(1, 4)) -> TensorProto:
    tensor = _declared(name, dims)
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(4 * int(np.prod(dims))))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def external_initializer(location: str) -> bytes:
    return _model([helper.make_node("Add", ["x", "w"], ["y"])], [_in()], [_out(rank=2)], [_external("w", location)])


def external_in_constant_attribute(location: str = "../secret.bin") -> bytes:
    return _model([helper.make_node("Constant", [], ["c"], value=_external("c", location)),
                   helper.make_node("Add", ["x", "c"], ["y"])], [_in()], [_out(rank=2)])


def external_in_sparse_initializer(location: str = "/etc/passwd") -> bytes:
    values = _external("w_values", location, dims=(2,))
    indices = numpy_helper.from_array(np.asarray([0, 3], dtype=np.int64), "w_indices")
    sparse = helper.make_sparse_tensor(values, indices, [1, 4])
    sparse.values.name = "w"
    return _model([helper.make_node("Add", ["x", "w"], ["y"])], [_in()], [_out(rank=2)], sparse=[sparse])


def _leaf(tensor: TensorProto):
    return helper.make_graph([helper.make_node("Constant", [], ["o"], value=tensor)], "leaf", [], [_out("o", rank=2)])


def _if_node(depth: int, location: str | None):
    """An If whose then-branch nests `depth` more Ifs; the innermost carries an external tensor when given."""
    ones = numpy_helper.from_array(np.ones((1, 4), np.float32), "c")
    if depth == 0:
        then = _leaf(_external("c", location) if location else ones)
    else:
        then = helper.make_graph([helper.make_node("Constant", [], ["cond"], value=numpy_helper.from_array(
            np.asarray(True), "t")), _if_node(depth - 1, location)], f"level{depth}", [], [_out("o", rank=2)])
    return helper.make_node("If", ["cond"], ["o"], then_branch=then, else_branch=_leaf(ones))


def external_in_subgraph(location: str = "../../outside.bin") -> bytes:
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    node = _if_node(1, location)
    node.output[0] = "y"
    return _model([node], [cond], [_out(rank=2)])


def deeply_nested_subgraphs(depth: int = 24) -> bytes:
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    node = _if_node(depth, None)
    node.output[0] = "y"
    return _model([node], [cond], [_out(rank=2)])


def checker_rejects() -> bytes:
    """A node that reads a value nobody produces: the ONNX checker refuses the graph."""
    return _model([helper.make_node("Relu", ["nowhere"], ["y"])], [_in()], [_out()])


def shape_inference_rejects() -> bytes:
    """Add of (1, 4) and (1, 3): broadcasting fails in ONNX shape inference (strict mode)."""
    other = helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 3])
    return _model([helper.make_node("Add", ["x", "z"], ["y"])], [_in(), other], [_out()])


def no_graph() -> bytes:
    model = helper.make_model(helper.make_graph([], "empty", [], []))
    model.ClearField("graph")
    return model.SerializeToString()
