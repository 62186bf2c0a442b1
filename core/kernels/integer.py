"""MatMulInteger and ConvInteger computes: int32 products of zero-point-shifted 8-bit operands.

The shifted operands are inlined stages (tag `int8_shift`), so the float conv and matmul computes,
and their schedules, serve the integer ops too: padding reads a shifted zero (ONNX pads the shifted
input with 0), and every product and sum is int32, exact for 8-bit operands up to K of 2^16.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..errors import ShapeError
from ..graph.ir import TensorType
from ..te import tensor as te
from ..te.intrinsics import get_intrinsic
from ..tir.expr import Expr, cast, const, logical_and, minimum, select
from .common import attr, require
from .conv2d import conv2d_nchw, conv_output_shape, read_conv
from .conv2d_nchwc import widened_columns
from .integer_depthwise import depthwise_conv_integer, is_depthwise
from .matmul import matmul
from .registry import register_compute

SHIFT_TAG = "int8_shift"


def shifted(x: te.Tensor, zero: Optional[te.Tensor], channel_axis: Optional[int], name: str) -> te.Tensor:
    """int32(x) - zero point: `zero` a scalar (any shape of one element) or one per `channel_axis` entry."""
    def body(*idx: Expr) -> Expr:
        value = cast("int32", x(*idx))
        if zero is None:
            return value
        if zero.ndim and zero.shape[0] > 1:
            point = zero(idx[channel_axis])
        else:
            point = zero(*([0] * zero.ndim))
        return value - cast("int32", point)

    return te.compute(x.shape, body, name=name, tag=SHIFT_TAG)


def _zero(inputs: Sequence[Optional[te.Tensor]], index: int) -> Optional[te.Tensor]:
    return inputs[index] if len(inputs) > index else None


@register_compute("MatMulInteger")
def matmul_integer(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    a, b = require(inputs, 2, "MatMulInteger")
    a32 = shifted(a, _zero(inputs, 2), None, "matmul_int_a")
    b32 = shifted(b, _zero(inputs, 3), b.ndim - 1, "matmul_int_b")
    return [matmul(a32, b32, may_pack=False)]


@register_compute("ConvInteger")
def conv_integer(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    x, w = require(inputs, 2, "ConvInteger")
    if x.ndim != 4 or w.ndim != 4:
        raise ShapeError(f"ConvInteger: only 2-D convolution (4-D NCHW input) is supported, got {list(x.shape)}")
    w32 = shifted(w, _zero(inputs, 3), 0, "conv_int_w")
    strides = tuple(attr(attrs, "strides", "ConvInteger", (1, 1)))
    pads = tuple(attr(attrs, "pads", "ConvInteger", (0, 0, 0, 0)))
    dilations = tuple(attr(attrs, "dilations", "ConvInteger", (1, 1)))
    group = int(attr(attrs, "group", "ConvInteger", 1))
    if is_depthwise(x, w, group):
        out = depthwise_conv_integer(x, _zero(inputs, 2), w32, strides, pads, dilations, SHIFT_TAG)
    else:
        out = conv2d_nchw(shifted(x, _zero(inputs, 2), None, "conv_int_x"), w32, strides, pads, dilations, group)
    shape = conv_output_shape(out)
    if out_types and tuple(out_types[0].shape) != shape:
        raise ShapeError(f"ConvInteger: computed output {list(shape)} differs from the graph's "
                         f"{list(out_types[0].shape)}")
    if shape != out.shape:
        return [te.compute(shape, lambda b, o, y, xx: read_conv(out, b, o, y, xx), name="conv2d_crop",
                           tag="conv2d_bias")]
    return [out]


def dot_stage(rows: tuple[int, ...], packed: te.Tensor, intrinsic, read_data) -> te.Tensor:
    """`int8_dot`, what tensorize matches: acc[rows.., j] = sum over (ko, ki) of
    int32(read_data(row indices, 4 ko + ki)) * int32(packed[j / lanes, ko, j % lanes, ki]), j over whole
    blocks; read_data must read the intrinsic's data dtype, 4 ko + ki contiguous."""
    blocks, depth_blocks, lanes, group = packed.shape
    if lanes != intrinsic.lanes or group != intrinsic.depth:
        raise ShapeError(f"packed weights {list(packed.shape)} do not fit {intrinsic.name}")
    ko, ki = te.reduce_axis(depth_blocks, "ko"), te.reduce_axis(group, "ki")

    def dot(*idx: Expr) -> Expr:
        *row, j = idx
        return te.sum(cast("int32", read_data(row, ko.var * group + ki.var))
                      * cast("int32", packed(j // lanes, ko.var, j % lanes, ki.var)), [ko, ki])

    return te.compute(tuple(rows) + (blocks * lanes,), dot, name="int8_dot", tag="int8_dot",
                      attrs={"intrinsic": intrinsic.name})


def _data_stage(shape: tuple[int, ...], depth: int, data_dtype: str, read) -> te.Tensor:
    """`int8_data`: [.., depth padded to whole groups of 4] in the intrinsic's data dtype from
    `read(outer indices, column) -> int32 value`; the padded columns hold 0 (their weights are 0)."""
    def staged(*idx: Expr) -> Expr:
        *rest, kk = idx
        value = cast(data_dtype, read(rest, minimum(kk, depth - 1)))
        return value if shape[-1] == depth else select(kk < depth, value, const(0, data_dtype))

    return te.compute(shape, staged, name="int8_data", tag="int8_data")


@register_compute("MatMulIntegerPacked")
def packed_matmul_integer(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    """Stages: `int8_data` (a shifted into the intrinsic's data dtype and padded to whole groups of 4,
    only when needed), `int8_dot` and `int8_dot_out` (plus the zero points' correction, N columns)."""
    a, packed, correction = require(inputs, 3, "MatMulIntegerPacked")
    zero = _zero(inputs, 3)  # a run-time data zero point: the correction is per unit of it (plus the shift)
    intrinsic = get_intrinsic(str(attrs["intrinsic"]))
    data_dtype = intrinsic.inputs[0].dtype
    shift, depth, columns = int(attrs["data_shift"]), int(attrs["depth"]), int(attrs["columns"])
    padded = packed.shape[1] * packed.shape[3]
    data = a
    if a.dtype != data_dtype or padded != depth:
        data = _data_stage(a.shape[:-1] + (padded,), depth, data_dtype,
                           lambda rest, kk: cast("int32", a(*rest, kk)) + shift)
    acc = dot_stage(a.shape[:-1], packed, intrinsic, lambda row, kk: data(*row, kk))

    def corrected(*idx: Expr) -> Expr:
        if zero is None:
            return acc(*idx) + correction(idx[-1])
        return acc(*idx) + correction(idx[-1]) * (cast("int32", zero(*([0] * zero.ndim))) + shift)

    return [te.compute(a.shape[:-1] + (columns,), corrected, name="int8_dot_out", tag="int8_dot_out")]


@register_compute("ConvIntegerPacked")
def packed_conv_integer(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    """Stages: `int8_data` (x padded and transposed to [n, rows, columns, C padded to whole groups of 4]
    in the intrinsic's data dtype: out-of-image taps hold the data's zero point, so they add nothing),
    `int8_dot` [n, oh, ow, O] (four consecutive channels of one pixel per intrinsic call, summed over the
    window's taps) and `int8_conv_out` (NCHW, plus the correction)."""
    x, packed, correction = require(inputs, 3, "ConvIntegerPacked")
    acc, columns = packed_conv_dot(x, packed, attrs, 0, "nchw")
    n, oh, _, _ = acc.shape
    ow = acc.op.attrs["conv_width"]
    return [te.compute((n, columns, oh, ow), lambda b, o, y, xx: acc(b, y, xx, o) + correction(o),
                       name="int8_conv_out", tag="int8_conv_out")]


@register_compute("ConvIntegerPackedNCHWc")
def packed_conv_integer_blocked(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any],
                                out_types: list[TensorType]):
    """ConvIntegerPacked's stages, reading NCHW or NCHW[in_block]c x and writing channels-last [n, 1, oh, ow, O]:
    each pixel's channels are contiguous, as in its `int8_dot` tile."""
    x, packed, correction = require(inputs, 3, "ConvIntegerPackedNCHWc")
    acc, columns = packed_conv_dot(x, packed, attrs, int(attrs.get("in_block", 0)), "channels_last")
    n, oh, _, _ = acc.shape
    ow = acc.op.attrs["conv_width"]
    return [te.compute((n, 1, oh, ow, columns), lambda b, _, y, xx, o: acc(b, y, xx, o) + correction(o),
                       name="int8_conv_out", tag="int8_conv_out")]


def packed_conv_dot(x: te.Tensor, packed: te.Tensor, attrs: Mapping[str, Any], in_block: int, output_layout: str):
    """(`int8_dot` [n, oh, ow, O padded], O) of a packed conv; x NCHW, or NCHW[in_block]c when in_block;
    output_layout ("nchw" or "channels_last") says where its epilogue writes (conv_point_map)."""
    intrinsic = get_intrinsic(str(attrs["intrinsic"]))
    data_dtype, group = intrinsic.inputs[0].dtype, intrinsic.depth
    shift, columns = int(attrs["data_shift"]), int(attrs["columns"])
    (kh, kw), (sh, sw), (dh, dw) = attrs["kernel"], attrs["strides"], attrs["dilations"]
    top, left, bottom, right = attrs["pads"]
    if in_block:
        n, blocks_in, h, w, _ = x.shape
        c = blocks_in * in_block
    else:
        n, c, h, w = x.shape
    oh = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    ow = (w + left + right - dw * (kw - 1) - 1) // sw + 1
    # The dot computes a few extra columns when no register tile of 2..8 rows divides ow (13 -> 14: squeezenet's
    # 13x13 convs got one-row tiles, 0.42 -> 0.24 ms for its last one); the epilogue skips them. Widening 27 and
    # 111 (3-row tiles) measured slower (0.08 -> 0.2 ms for its first conv).
    ow_c = ow if any(ow % rows == 0 for rows in range(2, 9)) else widened_columns(ow)
    width = max(w + left + right, (ow_c - 1) * sw + (kw - 1) * dw + 1)
    channel_blocks = packed.shape[1] // (kh * kw)
    if channel_blocks * kh * kw != packed.shape[1] or channel_blocks * group < c:
        raise ShapeError(f"ConvIntegerPacked: packed weights {list(packed.shape)} do not fit {c} channels x {kh}x{kw}")
    fill = const(int(attrs["data_zero_point"]) + shift, data_dtype)

    def transposed(b: Expr, y: Expr, xx: Expr, ch: Expr) -> Expr:
        row, col = y - top, xx - left
        channel, column = minimum(ch, c - 1), (minimum(col, w - 1) if width > w + left + right else col)
        raw = x(b, channel // in_block, row, column, channel % in_block) if in_block else x(b, channel, row, column)
        value = cast(data_dtype, cast("int32", raw) + shift)
        conds = ([row >= 0, row < h] if top or bottom else []) + \
            ([col >= 0, col < w] if left or right or width > w + left + right else [])
        for cond in conds:
            value = select(cond, value, fill)
        return value if channel_blocks * group == c else select(ch < c, value, const(0, data_dtype))

    data = te.compute((n, h + top + bottom, width, channel_blocks * group), transposed,
                      name="int8_data", tag="int8_data")
    blocks, _, lanes, _ = packed.shape
    r, q = te.reduce_axis(kh, "r"), te.reduce_axis(kw, "q")
    ko, ki = te.reduce_axis(channel_blocks, "ko"), te.reduce_axis(group, "ki")

    def dot(b: Expr, y: Expr, xx: Expr, o: Expr) -> Expr:
        a = data(b, y * sh + r.var * dh, xx * sw + q.var * dw, ko.var * group + ki.var)
        wt = packed(o // lanes, (r.var * kw + q.var) * channel_blocks + ko.var, o % lanes, ki.var)
        return te.sum(cast("int32", a) * cast("int32", wt), [r, q, ko, ki])

    acc = te.compute((n, oh, ow_c, blocks * lanes), dot, name="int8_dot", tag="int8_dot",
                     attrs={"intrinsic": intrinsic.name, "conv_columns": columns, "conv_width": ow,
                            "conv_output": output_layout})
    return acc, columns


def conv_point_map(op: te.ComputeOp):
    """For a packed conv's `int8_dot` stage ([n, oh, ow, O padded]), the map from its point to the output
    pixel its epilogue writes, NCHW (b, o, y, x) or channels-last (b, 0, y, x, o), while o is a real channel:
    the epilogue then runs on each register tile (reverse_compute_at) instead of a second pass. None for a
    matmul's."""
    columns, width, layout = op.attrs.get("conv_columns"), op.attrs.get("conv_width"), op.attrs.get("conv_output")
    if columns is None:
        return None

    def point(at):
        b, y, xx, o = at
        guards = ([o < columns] if columns < op.shape[3] else []) + ([xx < width] if width < op.shape[2] else [])
        guard = logical_and(*guards) if len(guards) == 2 else (guards[0] if guards else None)
        return ((b, o, y, xx) if layout == "nchw" else (b, const(0, b.dtype), y, xx, o)), guard

    return point
