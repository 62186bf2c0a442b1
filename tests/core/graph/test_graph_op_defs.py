"""Op definitions: every op folds, type inference rejects bad inputs with ShapeError, and the
window arithmetic follows ONNX (ceil_mode's last window must start inside input or left pad)."""
from __future__ import annotations

import numpy as np
import pytest

from core.errors import ShapeError
from core.graph.fold import fold_node
from core.graph.ir import Graph, Node, TensorType
from core.graph.op_defs.windows import output_size
from core.graph.ops import Pattern, all_ops, get_op, node_flops

F32 = "float32"

EXPECTED_OPS = {
    "If", "Loop",  # run at run time by the model entry (core/codegen/control_flow.py)
    "Relu", "Sigmoid", "Tanh", "Erf", "Sqrt", "Exp", "Log", "Neg", "Abs", "Reciprocal", "Floor", "Ceil", "Not",
    "IsNaN", "Identity", "Cast", "Clip", "LeakyRelu", "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Equal",
    "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Where", "Conv", "MaxPool", "AveragePool",
    "GlobalAveragePool", "GlobalMaxPool", "MatMul", "Reshape", "Transpose", "Concat", "Slice", "Gather",
    "GatherElements", "Expand", "Pad", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
    "Softmax", "LogSoftmax", "LayerNormalization",
    "Round", "Sign", "BitwiseNot", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh",
    "Atanh", "IsInf", "BitCast", "FloorMod", "TruncMod", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitShiftLeft",
    "BitShiftRight",
    "ArgMax", "ArgMin", "CumSum", "CumProd", "TopK", "Trilu", "EyeLike", "GatherND", "OneHot", "ReverseSequence",
    "ScatterElements", "ScatterND", "Einsum", "TensorScatter",  # indexing, selection and reduction-like ops
    "NonZero", "Compress", "Unique", "NonMaxSuppression",  # data-dependent sizes: padded output plus its bound
    "Interpolate", "PoolND", "ConvND", "MaxUnpool",  # spatial: Resize's tap tables, N-d pools and convs
    "GridSample", "DeformColumns", "RoiAlign", "MaxPoolWithIndices",
    "TreeEnsemble",  # ai.onnx.ml tree ensembles: leaf weights aggregated over flat node tables
    "PairwiseCoupling",  # ai.onnx.ml SVM probabilities: libsvm's coupling of pairwise probabilities
    "Fused",  # made only by the fusion pass: a group of the ops above as one kernel
    # made only by the layout pass (alter_layout, -O3): the blocked layout NCHW[x]c
    "LayoutTransform", "Conv2dNCHWc", "Conv2dWinogradNCHWc", "MaxPoolNCHWc", "AveragePoolNCHWc", "GlobalAveragePoolNCHWc",
    "GlobalMaxPoolNCHWc",
    "ConvNDNCHWc", "PoolNDNCHWc",  # made only by alter_layout_3d (-O3): 3-D convs and pools in NCDHW[x]c
    "MatMulInteger", "ConvInteger",  # 8-bit operands, int32 sums
    "MatMulIntegerPacked", "ConvIntegerPacked",  # made only by pack_int8_weights (-O3): tensorized 8-bit kernels
    "ConvIntegerPackedNCHWc", "DepthwiseConvIntegerNCHWc",  # made only by alter_layout: channels-last 8-bit convs
    "DequantizeLinear", "QuantizeLinear", "Requantize",  # 8-bit quantization; the integer rewrite (integer_qdq)
    "QuantizedBinary", "LookupTable",  # made only by integer_qdq: QDQ Add/Mul, tabulated elementwise functions
    "LSTMSequence", "GRUSequence",  # made only by the LSTM/GRU converter: a layer direction's steps in one op
    "SoftmaxAttention",  # made only by fuse_attention (-O3): MatMul, Softmax, MatMul as one kernel
}
COMPILE_ONLY_OPS = {"GridSample", "DeformColumns", "RoiAlign", "MaxPoolWithIndices", "If", "Loop"}


def test_op_set_is_exactly_the_contract_and_every_op_folds():
    ops = all_ops()
    assert set(ops) == EXPECTED_OPS
    # Sampling ops only compile (no numpy fold yet): fold_constants leaves them to their kernels.
    assert {name for name, op in ops.items() if op.fold is None} == COMPILE_ONLY_OPS
    assert ops["Conv"].pattern == Pattern.OUT_ELEMWISE_FUSABLE and ops["Softmax"].pattern == Pattern.OPAQUE
    assert ops["ReduceMean"].pattern == Pattern.REDUCTION and ops["Slice"].pattern == Pattern.INJECTIVE


def _infer(op, shapes, dtype=F32, **attrs):
    return get_op(op).infer([TensorType(s, dtype) for s in shapes], attrs)


@pytest.mark.parametrize("op,shapes,attrs,match", [
    ("Conv", [(1, 4, 8, 8), (6, 3, 3, 3)], dict(strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=2),
     "group"),
    ("Conv", [(1, 3, 2, 2), (6, 3, 3, 3)], dict(strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1),
     "does not fit"),
    ("Conv2dWinogradNCHWc", [(1, 2, 8, 8, 8), (9, 2, 2, 8, 8)], dict(pads=(1, 1, 1, 1)), "transformed"),
    ("Conv2dWinogradNCHWc", [(1, 2, 8, 8, 8), (16, 2, 3, 8, 8)], dict(pads=(1, 1, 1, 1)), "not blocked like"),
    ("MatMul", [(2, 3), (4, 5)], {}, "inner dimensions"),
    ("MatMul", [(3,), (3, 5)], {}, "rank >= 2"),
    ("Reshape", [(2, 3)], dict(shape=(4, 2)), "cannot reshape"),
    ("Reshape", [(2, 3)], dict(shape=(-1, 2)), "fully resolved"),
    ("Concat", [(2, 3), (3, 3)], dict(axis=1), "differ outside axis"),
    ("Concat", [(2, 3)], dict(axis=-1), "out of range"),
    ("Transpose", [(2, 3)], dict(perm=(0, 0)), "permutation"),
    ("Slice", [(5,)], dict(starts=(4,), steps=(1,), sizes=(3,)), "outside"),
    ("Expand", [(3, 2)], dict(shape=(3, 1)), "final broadcast shape"),
    ("ReduceSum", [(2, 3)], dict(axes=(1, 0), keepdims=1), "sorted"),
    ("Softmax", [(2, 3)], dict(axis=2), "out of range"),
    ("MaxPool", [(1, 1, 4, 4)], dict(kernel=(2, 2), strides=(1, 1), pads=(2, 0, 0, 0), dilations=(1, 1), ceil_mode=0),
     "smaller than the kernel"),
    ("Pad", [(2, 3)], dict(pads=(0, 0, 1), mode="constant", value=0.0), "must be 4 ints"),
    ("LayerNormalization", [(2, 4), (3,)], dict(axis=1, epsilon=1e-5), "broadcast"),
])
def test_infer_rejects_mismatches(op, shapes, attrs, match):
    with pytest.raises(ShapeError, match=match):
        _infer(op, shapes, **attrs)


def test_binary_ops_need_one_dtype():
    with pytest.raises(ShapeError, match="share one dtype"):
        get_op("Add").infer([TensorType((2,), F32), TensorType((2,), "int64")], {})


@pytest.mark.parametrize("size,kernel,stride,pads,ceil_mode,expected", [
    (6, 3, 2, (0, 0), 0, 2), (6, 3, 2, (0, 0), 1, 3), (5, 2, 2, (1, 1), 1, 3), (4, 2, 2, (1, 1), 1, 3),
    (7, 3, 3, (1, 0), 1, 3), (112, 3, 2, (0, 0), 1, 56), (13, 3, 2, (0, 0), 1, 6),
])
def test_pool_output_size_follows_onnx(size, kernel, stride, pads, ceil_mode, expected):
    assert output_size("MaxPool", size, kernel, stride, *pads, 1, ceil_mode) == expected


def test_fold_checks_declared_types():
    inputs = [np.array([1, -2], np.int64), np.array([2, 2], np.int64)]
    (quotient,) = fold_node("Div", inputs, {}, [TensorType((2,), "int64")])
    np.testing.assert_array_equal(quotient, [0, -1])
    with pytest.raises(RuntimeError, match="declared"):
        fold_node("Div", inputs, {}, [TensorType((2,), "float32")])


def test_slice_fold_with_negative_steps():
    x = np.arange(10)
    (y,) = fold_node("Slice", [x], {"starts": (9,), "steps": (-3,), "sizes": (4,)}, [TensorType((4,), "int64")])
    np.testing.assert_array_equal(y, [9, 6, 3, 0])


def test_gather_wraps_negative_indices_once_and_rejects_out_of_range():
    data = np.arange(5, dtype=np.float32)
    (y,) = fold_node("Gather", [data, np.array([-1, 0])], {"axis": 0}, [TensorType((2,), F32)])
    np.testing.assert_array_equal(y, [4, 0])
    with pytest.raises(ShapeError, match="out of range"):
        fold_node("Gather", [data, np.array([-6])], {"axis": 0}, [TensorType((1,), F32)])


def t(*shape: int) -> TensorType:
    return TensorType(shape, F32)


@pytest.mark.parametrize("op,inputs,outputs,flops", [
    ("Conv", [t(1, 8, 10, 10), t(16, 4, 3, 3), t(16)], [t(1, 16, 8, 8)], 2 * 1024 * 4 * 9),  # group 2
    ("Conv2dNCHWc", [t(1, 1, 10, 10, 8), t(2, 1, 3, 3, 8, 8)], [t(1, 2, 8, 8, 8)], 2 * 1024 * 8 * 9),
    ("Conv2dWinogradNCHWc", [t(1, 2, 8, 8, 8), t(16, 4, 2, 8, 8)], [t(1, 4, 8, 8, 8)], 2 * 2048 * 16 * 9),
    ("MatMul", [t(2, 5, 7), t(7, 3)], [t(2, 5, 3)], 2 * 30 * 7),
    ("Relu", [t(4, 5)], [t(4, 5)], 20),  # one operation per output element
    ("MaxPoolNCHWc", [t(1, 2, 8, 8, 8)], [t(1, 2, 4, 4, 8)], 256),  # a blocked variant counts as its base op
])
def test_flops_are_declared_on_the_op(op, inputs, outputs, flops):
    assert get_op(op).flops(inputs, outputs, {}) == flops


def test_node_flops_types_a_node_by_its_graph():
    graph = Graph(("a",), ("y",), (Node("MatMul", ("a", "b"), ("y",)),),
                  {"a": t(4, 6), "b": t(6, 2), "y": t(4, 2)}, {"b": np.ones((6, 2), np.float32)})
    assert node_flops(graph.nodes[0], graph) == 2 * 8 * 6
