"""ConvNDNCHWc and PoolNDNCHWc: ConvND (3-D convs, weights packed at compile time as OIDHW[x]i[y]o) and PoolND
(max, average) on channel-blocked NCDHW[x]c values (N, C/x, D, H, W, x); each folds by unblocking, running the
plain op's fold and blocking again."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from core.errors import ShapeError
from core.graph.ir import TensorType
from core.graph.ops import Pattern, get_op, register_op
from core.packing.blocked import from_blocked, to_blocked, unpack_weights

from ._common import expect_arity, multiply_add_flops
from .conv_nd import conv_nd_fold
from .pool_nd import pool_nd_fold


def _unblocked(op: str, t: TensorType) -> TensorType:
    if t.rank < 4:
        raise ShapeError(f"{op}: expects a blocked (N, C/x, D1, ..., x) input, got {t}")
    return TensorType((t.shape[0], t.shape[1] * t.shape[-1]) + t.shape[2:-1], t.dtype)


def conv_nd_blocked_plain(types: Sequence[TensorType], attrs: Mapping) -> tuple[list[TensorType], dict, int]:
    """The plain ConvND's input types (data, O I/group *kernel weights, bias), its attrs and the output block."""
    expect_arity("ConvNDNCHWc", types, 2, 3)
    x, w = types[0], types[1]
    spatial = x.rank - 3
    if spatial < 1 or w.rank != spatial + 4:
        raise ShapeError(f"ConvNDNCHWc: expects blocked data and packed weights of one more axis each, got {x}, {w}")
    ocb, icb, *kernel, ib, ob = w.shape
    group = int(attrs.get("group", 1))
    if attrs.get("depthwise"):
        if icb != 1 or ib != 1 or x.shape[-1] != ob or x.shape[1] != ocb:
            raise ShapeError(f"ConvNDNCHWc: depthwise weights {w} do not match the input {x}")
        group, plain_w = ocb * ob, TensorType((ocb * ob, 1, *kernel), w.dtype)
    else:
        if x.shape[-1] != ib or x.shape[1] != icb * group or ocb % group:
            raise ShapeError(f"ConvNDNCHWc: input {x} is not blocked like the weights {w} (by {ib}, group={group})")
        plain_w = TensorType((ocb * ob, icb * ib, *kernel), w.dtype)
    plain = [_unblocked("ConvNDNCHWc", x), plain_w]
    if len(types) == 3:
        if types[2].shape != (ocb, ob):
            raise ShapeError(f"ConvNDNCHWc: bias must have shape [{ocb}, {ob}], got {types[2]}")
        plain.append(TensorType((ocb * ob,), types[2].dtype))
    plain_attrs = {k: attrs.get(k) for k in ("strides", "dilations", "pads")}
    return plain, dict(plain_attrs, group=group), ob


def _fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    types = [TensorType(a.shape, a.dtype.name) for a in inputs if a is not None]
    _, plain_attrs, ob = conv_nd_blocked_plain(types, attrs)
    plain = [from_blocked(inputs[0]), unpack_weights(inputs[1], bool(attrs.get("depthwise")))]
    plain += [inputs[2].reshape(-1)] if len(inputs) > 2 and inputs[2] is not None else []
    (y,) = conv_nd_fold(plain, plain_attrs)
    return [to_blocked(y, ob)]


# Packed weights (O/ob, I/ib, *kernel, ib, ob): input channels per group x window multiply-adds per output, as ConvND.
@register_op("ConvNDNCHWc", Pattern.OUT_ELEMWISE_FUSABLE, fold=_fold,
             flops=multiply_add_flops(lambda inputs: int(np.prod(inputs[1].shape[1:-1]))))
def _conv_nd_nchwc(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    plain, plain_attrs, ob = conv_nd_blocked_plain(types, attrs)
    (out,) = get_op("ConvND").infer(plain, plain_attrs)
    return [TensorType((out.shape[0], out.shape[1] // ob) + out.shape[2:] + (ob,), out.dtype)]


def _pool_fold(inputs: Sequence[np.ndarray], attrs: Mapping) -> list[np.ndarray]:
    (y,) = pool_nd_fold([from_blocked(inputs[0])], attrs)
    return [to_blocked(y, inputs[0].shape[-1])]


@register_op("PoolNDNCHWc", Pattern.REDUCTION, fold=_pool_fold)
def _pool_nd_nchwc(types: Sequence[TensorType], attrs: Mapping) -> list[TensorType]:
    expect_arity("PoolNDNCHWc", types, 1)
    if attrs.get("mode") not in ("max", "avg"):
        raise ShapeError(f"PoolNDNCHWc: mode must be max or avg, got {attrs.get('mode')!r}")
    x = types[0]
    (out,) = get_op("PoolND").infer([_unblocked("PoolNDNCHWc", x)], attrs)
    return [TensorType(x.shape[:2] + out.shape[2:] + x.shape[-1:], x.dtype)]
