"""Ops of the blocked layout NCHW[x]c (5-D values (N, C/x, H, W, x)): LayoutTransform, Conv2dNCHWc,
Conv2dWinogradNCHWc and the blocked pools. Each folds by unblocking, running the NCHW op's fold and
blocking again."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, get_op, register_op
from core.packing.blocked import from_blocked, relayout, to_blocked, unpack_weights
from core.packing.winograd import TRANSFORMS, weights_from_winograd

from ._common import expect_arity, multiply_add_flops
from .conv import conv2d_nchw


def _block_attr(op: str, attrs: Mapping, key: str) -> int:
    value = attrs.get(key)
    if not isinstance(value, int) or value < 0:
        raise ShapeError(f"{op}: attribute {key} must be a block size >= 0 (0: NCHW), got {value!r}")
    return value


def unblocked_type(op: str, t: TensorType) -> TensorType:
    """The NCHW type of a blocked (N, C/x, H, W, x) value."""
    if t.rank != 5:
        raise ShapeError(f"{op}: expects a 5-D NCHW[x]c input, got {t}")
    n, cb, h, w, b = t.shape
    return TensorType((n, cb * b, h, w), t.dtype)


def blocked_type(op: str, t: TensorType, block: int) -> TensorType:
    if t.rank != 4 or block < 1 or t.shape[1] % block:
        raise ShapeError(f"{op}: cannot block {t} by {block} channels")
    n, c, h, w = t.shape
    return TensorType((n, c // block, h, w, block), t.dtype)


# -- LayoutTransform ----------------------------------------------------------------------------
def _transform_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    return [relayout(inputs[0], attrs["src_block"], attrs["dst_block"])]


@register_op("LayoutTransform", Pattern.INJECTIVE, fold=_transform_fold)
def _layout_transform(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("LayoutTransform", types, 1)
    src, dst = _block_attr("LayoutTransform", attrs, "src_block"), _block_attr("LayoutTransform", attrs, "dst_block")
    x = types[0]  # NCHW or NCDHW (3-D convs), plain or blocked
    if src and (x.shape[-1:] != (src,) or x.rank not in (5, 6)):
        raise ShapeError(f"LayoutTransform: input {x} is not in NCHW{src}c or NCDHW{src}c")
    plain = TensorType((x.shape[0], x.shape[1] * src) + x.shape[2:-1], x.dtype) if src else x
    if plain.rank not in (4, 5):
        raise ShapeError(f"LayoutTransform: expects a 4-D NCHW or 5-D NCDHW input, got {x}")
    if dst and plain.shape[1] % dst:
        raise ShapeError(f"LayoutTransform: cannot block {plain} by {dst} channels")
    return [TensorType((plain.shape[0], plain.shape[1] // dst) + plain.shape[2:] + (dst,), x.dtype) if dst else plain]


# -- Conv2dNCHWc --------------------------------------------------------------------------------
def _conv_nchw_attrs(attrs: Mapping, channels: int) -> dict:
    return {"strides": attrs.get("strides"), "pads": attrs.get("pads"), "dilations": attrs.get("dilations"),
            "group": channels if attrs.get("depthwise") else int(attrs.get("group", 1))}


def _conv_nchwc_types(types: Sequence[TensorType], attrs: Mapping) -> tuple[list[TensorType], int]:
    """The NCHW Conv's input types (data, OIHW weights, bias) and the output block."""
    expect_arity("Conv2dNCHWc", types, 2, 3)
    x, w = types[0], types[1]
    if w.rank != 6:
        raise ShapeError(f"Conv2dNCHWc: weights must be packed OIHW[x]i[y]o (6-D), got {w}")
    ocb, icb, kh, kw, ib, ob = w.shape
    plain_x = unblocked_type("Conv2dNCHWc", x)
    if attrs.get("depthwise"):
        if icb != 1 or ib != 1 or x.shape[-1] != ob or x.shape[1] != ocb:
            raise ShapeError(f"Conv2dNCHWc: depthwise weights {w} do not match the input {x}")
        oihw = TensorType((ocb * ob, 1, kh, kw), w.dtype)
    else:
        group = int(attrs.get("group", 1))
        if x.shape[-1] != ib or x.shape[1] != icb * group or ocb % group:
            raise ShapeError(f"Conv2dNCHWc: input {x} is not blocked like the weights {w} (by {ib}, group={group})")
        oihw = TensorType((ocb * ob, icb * ib, kh, kw), w.dtype)
    return [plain_x, oihw] + _plain_bias("Conv2dNCHWc", types, ocb, ob), ob


def _plain_bias(op: str, types: Sequence[TensorType], ocb: int, ob: int) -> list[TensorType]:
    """The NCHW Conv's bias type for a blocked (O/ob, ob) bias, if the op has one."""
    if len(types) < 3:
        return []
    if types[2].shape != (ocb, ob):
        raise ShapeError(f"{op}: bias must have shape [{ocb}, {ob}], got {types[2]}")
    return [TensorType((ocb * ob,), types[2].dtype)]


def _conv_nchwc_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    x, w = from_blocked(inputs[0]), unpack_weights(inputs[1], bool(attrs.get("depthwise")))
    plain = [x, w] + ([inputs[2].reshape(-1)] if len(inputs) > 2 and inputs[2] is not None else [])
    (y,) = conv2d_nchw(plain, _conv_nchw_attrs(attrs, x.shape[1]))
    return [to_blocked(y, inputs[1].shape[-1])]


# Packed OIHW[x]i[y]o weights: input channels per group x window multiply-adds per output element, as Conv.
@register_op("Conv2dNCHWc", Pattern.OUT_ELEMWISE_FUSABLE, fold=_conv_nchwc_fold,
             flops=multiply_add_flops(lambda inputs: int(np.prod(inputs[1].shape[1:5]))))
def _conv2d_nchwc(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    plain, ob = _conv_nchwc_types(types, attrs)
    (out,) = get_op("Conv").infer(plain, _conv_nchw_attrs(attrs, plain[0].shape[1]))
    return [blocked_type("Conv2dNCHWc", out, ob)]


# -- Conv2dWinogradNCHWc: a 3x3 stride-1 conv with Winograd-transformed weights -------------
def _winograd_types(types: Sequence[TensorType], attrs: Mapping) -> tuple[list[TensorType], int]:
    """The NCHW Conv's input types (data, OIHW weights, bias) and the output block."""
    expect_arity("Conv2dWinogradNCHWc", types, 2, 3)
    x, u = types[0], types[1]
    if u.rank != 5 or u.shape[0] not in {t.alpha * t.alpha for t in TRANSFORMS.values()}:
        raise ShapeError(f"Conv2dWinogradNCHWc: weights must be transformed (16 or 36, O/ob, I/ib, ib, ob), got {u}")
    _, ocb, icb, ib, ob = u.shape
    if x.shape[1:2] != (icb,) or x.shape[-1:] != (ib,):
        raise ShapeError(f"Conv2dWinogradNCHWc: input {x} is not blocked like the weights {u} (by {ib})")
    plain = [unblocked_type("Conv2dWinogradNCHWc", x), TensorType((ocb * ob, icb * ib, 3, 3), u.dtype)]
    return plain + _plain_bias("Conv2dWinogradNCHWc", types, ocb, ob), ob


def _winograd_conv_attrs(attrs: Mapping) -> dict:
    return {"strides": (1, 1), "pads": attrs.get("pads"), "dilations": (1, 1), "group": 1}


def _winograd_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    plain = [from_blocked(inputs[0]), weights_from_winograd(inputs[1])]
    plain += [inputs[2].reshape(-1)] if len(inputs) > 2 and inputs[2] is not None else []
    (y,) = conv2d_nchw(plain, _winograd_conv_attrs(attrs))
    return [to_blocked(y, inputs[1].shape[-1])]


# Counted as the direct 3x3 conv it computes (not the fewer multiplies of the transformed product).
@register_op("Conv2dWinogradNCHWc", Pattern.OUT_ELEMWISE_FUSABLE, fold=_winograd_fold,
             flops=multiply_add_flops(lambda inputs: 9 * int(np.prod(inputs[1].shape[2:4]))))
def _conv2d_winograd_nchwc(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    plain, ob = _winograd_types(types, attrs)
    (out,) = get_op("Conv").infer(plain, _winograd_conv_attrs(attrs))
    return [blocked_type("Conv2dWinogradNCHWc", out, ob)]


# -- blocked variants of channel-preserving NCHW ops (pools) ------------------------------------
def register_blocked_variant(base: str) -> str:
    """`{base}NCHWc`: the NCHW op `base` (one input, channels kept) on a blocked value."""
    name = f"{base}NCHWc"
    definition = get_op(base)

    def infer(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
        expect_arity(name, types, 1)
        (out,) = definition.infer([unblocked_type(name, types[0])], attrs)
        return [blocked_type(name, out, types[0].shape[-1])]

    def fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
        (out,) = definition.fold([from_blocked(inputs[0])], attrs)
        return [to_blocked(out, inputs[0].shape[-1])]

    register_op(name, definition.pattern, fold=fold, flops=definition.flops)(infer)
    return name


BLOCKED_VARIANTS = {base: register_blocked_variant(base)
                    for base in ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")}
