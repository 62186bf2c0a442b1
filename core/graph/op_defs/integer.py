"""MatMulInteger and ConvInteger: 8-bit operands minus their zero points, products summed in int32."""
from __future__ import annotations

from typing import Mapping, Optional, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, register_op

from ._common import broadcast_shapes, expect_arity, expect_dtype, multiply_add_flops
from .conv import conv2d_nchw, grouped_conv_geometry
from .windows import output_hw, pads4, pair

EIGHT_BIT = frozenset({"int8", "uint8"})


def _zero_points(op: str, types: Sequence[TensorType], channels: int, channel_what: str) -> None:
    """Inputs 2 and 3, when given: the data's zero point is one scalar, the weights' one scalar or
    one per `channel_what` (shape [channels]); each has its operand's dtype."""
    if len(types) > 2:
        if types[2].numel != 1 or types[2].rank > 1:
            raise ShapeError(f"{op}: the zero point of input 0 must be a scalar, got {types[2]}")
        if types[2].dtype != types[0].dtype:
            raise ShapeError(f"{op}: zero point {types[2]} does not have input 0's dtype {types[0].dtype}")
    if len(types) > 3:
        if not (types[3].numel == 1 and types[3].rank <= 1) and types[3].shape != (channels,):
            raise ShapeError(f"{op}: the zero point of input 1 must be a scalar or [{channels}] "
                             f"(one per {channel_what}), got {types[3]}")
        if types[3].dtype != types[1].dtype:
            raise ShapeError(f"{op}: zero point {types[3]} does not have input 1's dtype {types[1].dtype}")


def _operands(types: Sequence[TensorType], op: str) -> None:
    expect_arity(op, types, 2, 4)
    expect_dtype(op, types[0], EIGHT_BIT, "input 0")
    expect_dtype(op, types[1], EIGHT_BIT, "input 1")


def _shifted(inputs: Sequence[Optional[np.ndarray]], index: int, channel_shape: tuple[int, ...]) -> np.ndarray:
    value = inputs[index].astype(np.int64)
    if len(inputs) > index + 2 and inputs[index + 2] is not None:
        zero = inputs[index + 2].astype(np.int64)
        value = value - (zero.reshape(()) if zero.size == 1 else zero.reshape(channel_shape))
    return value


def matmul_integer_reference(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    """numpy's integer matmul on zero-point-shifted operands (int64, exact), as int32."""
    a, b = _shifted(inputs, 0, ()), _shifted(inputs, 1, (inputs[1].shape[-1],))
    return [np.matmul(a, b).astype(np.int32)]


def conv_integer_reference(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    """The float Conv reference on zero-point-shifted operands in float64 (exact for int32 sums), as int32."""
    x = _shifted(inputs, 0, ()).astype(np.float64)
    w = _shifted(inputs, 1, (inputs[1].shape[0], 1, 1, 1)).astype(np.float64)
    return [np.rint(conv2d_nchw([x, w], attrs)[0]).astype(np.int32)]


@register_op("MatMulInteger", Pattern.OUT_ELEMWISE_FUSABLE, fold=matmul_integer_reference,
             flops=multiply_add_flops(lambda inputs: inputs[0].shape[-1]))
def _matmul_integer(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    _operands(types, "MatMulInteger")
    a, b = types[0], types[1]
    if a.rank < 2 or b.rank < 2:
        raise ShapeError(f"MatMulInteger: operands must have rank >= 2 (the frontend reshapes vectors), "
                         f"got {a} and {b}")
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"MatMulInteger: inner dimensions differ: {a} x {b}")
    _zero_points("MatMulInteger", types, b.shape[-1], "column of input 1")
    batch = broadcast_shapes("MatMulInteger", a.shape[:-2], b.shape[:-2])
    return [TensorType(batch + (a.shape[-2], b.shape[-1]), "int32")]


@register_op("ConvInteger", Pattern.OUT_ELEMWISE_FUSABLE, fold=conv_integer_reference,
             flops=multiply_add_flops(lambda inputs: int(np.prod(inputs[1].shape[1:]))))
def _conv_integer(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    """2-D NCHW x, OIHW w; attributes as Conv's (strides, pads (top, left, bottom, right), dilations, group)."""
    _operands(types, "ConvInteger")
    out_shape = grouped_conv_geometry("ConvInteger", types[0], types[1], attrs)[0]
    _zero_points("ConvInteger", types, out_shape[1], "output channel")
    return [TensorType(out_shape, "int32")]


def _unpacked(inputs: Sequence[np.ndarray], attrs: Mapping) -> np.ndarray:
    from core.packing.int8 import unpack_dot_weights

    return unpack_dot_weights(inputs[1], int(attrs["depth"]), int(attrs["columns"])).astype(np.int64)


def packed_matmul_integer_reference(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    shift = int(attrs["data_shift"])
    a, correction = inputs[0].astype(np.int64) + shift, inputs[2].astype(np.int64)
    if len(inputs) > 3 and inputs[3] is not None:  # a run-time zero point: the correction is per unit of it
        correction = correction * (int(np.asarray(inputs[3]).reshape(-1)[0]) + shift)
    return [(np.matmul(a, _unpacked(inputs, attrs)) + correction).astype(np.int32)]


@register_op("MatMulIntegerPacked", Pattern.OUT_ELEMWISE_FUSABLE, fold=packed_matmul_integer_reference,
             flops=multiply_add_flops(lambda inputs: inputs[0].shape[-1]))
def _packed_matmul_integer(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    """MatMulInteger with constant weights packed for a dot-product intrinsic (core/graph/passes/
    pack_int8_weights.py): y = sum_k (a + data_shift) * b + correction, inputs (a, packed b [N/lanes,
    K/4, lanes, 4] int8, correction [N] int32), attrs columns (N), depth (K), data_shift, intrinsic. With a fourth
    input, a's zero point known only at run time (DynamicQuantizeLinear's), the correction is -sum_k b per unit of
    it: y = sum_k (a + data_shift) * b + correction * (zero point + data_shift)."""
    expect_arity("MatMulIntegerPacked", types, 3, 4)
    a, packed, correction = types[:3]
    if len(types) == 4 and (types[3].dtype != a.dtype or types[3].numel != 1):
        raise ShapeError(f"MatMulIntegerPacked: the data zero point must be one {a.dtype}, got {types[3]}")
    expect_dtype("MatMulIntegerPacked", a, EIGHT_BIT, "input 0")
    expect_dtype("MatMulIntegerPacked", packed, {"int8", "uint8"}, "packed weights")
    n, k = int(attrs["columns"]), int(attrs["depth"])
    if a.rank < 2 or a.shape[-1] != k or packed.rank != 4 or packed.shape[0] * packed.shape[2] < n:
        raise ShapeError(f"MatMulIntegerPacked: {a} x packed {packed} does not make [.., {k}] x [{k}, {n}]")
    if correction.shape != (n,) or correction.dtype != "int32":
        raise ShapeError(f"MatMulIntegerPacked: the correction must be int32 [{n}], got {correction}")
    return [TensorType(a.shape[:-1] + (n,), "int32")]


def packed_conv_integer_reference(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    """sum over the window of (x padded with data_zero_point, + data_shift) * w, + correction; the packed
    weights are [kh, kw, C padded to groups of 4] x O (core/packing/int8.py pack_conv_weights)."""
    from core.packing.int8 import unpack_conv_weights

    o, c = int(attrs["columns"]), inputs[0].shape[1]
    w = unpack_conv_weights(inputs[1], tuple(attrs["kernel"]), c, o).astype(np.int64)
    base = int(attrs["data_zero_point"]) + int(attrs["data_shift"])
    conv_attrs = {key: attrs[key] for key in ("strides", "pads", "dilations")} | {"group": 1}
    x = inputs[0].astype(np.int64) + int(attrs["data_shift"])
    y = conv_integer_reference([x, w, np.array(base)], conv_attrs)[0]
    y = y.astype(np.int64) + base * w.sum(axis=(1, 2, 3)).reshape(1, o, 1, 1)
    return [(y + inputs[2].astype(np.int64).reshape(1, o, 1, 1)).astype(np.int32)]


@register_op("ConvIntegerPacked", Pattern.OUT_ELEMWISE_FUSABLE, fold=packed_conv_integer_reference,
             flops=lambda inputs, outputs, attrs: 2 * outputs[0].numel * inputs[0].shape[1]
             * int(np.prod(attrs["kernel"])))
def _packed_conv_integer(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    """ConvInteger (group 1) with constant weights packed for a dot-product intrinsic (pack_int8_weights):
    inputs (x, packed [O/lanes, kh*kw*C4/4, lanes, 4] (C4: C padded to a multiple of 4), correction [O]
    int32); attrs kernel, strides, pads, dilations, columns (O), data_zero_point, data_shift, intrinsic."""
    expect_arity("ConvIntegerPacked", types, 3)
    x, packed, correction = types
    expect_dtype("ConvIntegerPacked", x, EIGHT_BIT, "input 0")
    if x.rank != 4 or packed.rank != 4:
        raise ShapeError(f"ConvIntegerPacked: expects 4-D NCHW input and packed weights, got {x} and {packed}")
    o = int(attrs["columns"])
    if correction.shape != (o,) or correction.dtype != "int32":
        raise ShapeError(f"ConvIntegerPacked: the correction must be int32 [{o}], got {correction}")
    oh, ow = output_hw("ConvIntegerPacked", x.shape[2:], attrs["kernel"],
                       pair("ConvIntegerPacked", attrs, "strides", 1),
                       pads4("ConvIntegerPacked", attrs), pair("ConvIntegerPacked", attrs, "dilations", 1))
    return [TensorType((x.shape[0], o, oh, ow), "int32")]
