"""Tuning template of ConvNDNCHWc (3-D convs in NCDHW[x]c): its register tile, where the input-channel loop sits
and whether the window-column loop unrolls (schedules/conv_nd_nchwc.py)."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..kernels.schedules.conv2d_nchwc import IC_INSIDE_WINDOW, IC_OUTSIDE_WINDOW
from ..kernels.schedules.conv_nd_nchwc import schedule_conv_nd_nchwc
from ..target import Target
from ..te.schedule import Schedule, Stage
from ..te.tensor import ComputeOp, Tensor
from ..tir.stmt import ForKind
from .space import ConfigSpace
from .templates import (MAX_ACCUMULATOR_VECTORS, MAX_TILE_ROWS, MAX_UNROLLED_FMAS, Template, _divisors,
                        register_template, split_factor)


def define_conv_nd_nchwc(op: ComputeOp, target: Target, default: Mapping[str, int]) -> ConfigSpace:
    """ow_tile columns x oc_tile channel blocks x oh_tile rows (exact splits); reduce_order and unroll_kw where
    they change the loop nest (several input blocks and a window; a window wider than one column)."""
    space = ConfigSpace()
    _, ocb, *_, oh, ow, _ = op.axis
    space.define_knob("ow_tile", sorted(set(_divisors(ow.extent, MAX_ACCUMULATOR_VECTORS)) | {default["ow_tile"]}))
    if not op.attrs.get("depthwise"):
        per_group = ocb.extent // op.attrs.get("group", 1)
        space.define_knob("oc_tile", sorted(set(_divisors(per_group, 8)) | {default["oc_tile"]}))
    space.define_knob("oh_tile", sorted(set(_divisors(oh.extent, MAX_TILE_ROWS)) | {default["oh_tile"]}))
    kernel = op.attrs["kernel"]
    if not op.attrs.get("depthwise") and op.reduce_axis[0].extent > 1 and max(kernel) > 1:
        space.define_knob("reduce_order", [IC_OUTSIDE_WINDOW, IC_INSIDE_WINDOW])
    if kernel[-1] > 1:
        space.define_knob("unroll_kw", [0, 1])
    return space


def read_conv_nd_nchwc_default(stage: Stage) -> dict:
    op = stage.op
    _, ocb, *_, oh, ow, _ = op.axis
    unrolled = {id(iv) for iv, kind in stage.annotations.items() if kind is ForKind.UNROLLED}
    out = {"ow_tile": split_factor(stage, ow) or ow.extent, "oc_tile": split_factor(stage, ocb) or 1,
           "oh_tile": split_factor(stage, oh) or 1, "unroll_kw": 0}
    if op.attrs.get("depthwise"):
        return dict(out, unroll_kw=int(id(op.reduce_axis[-1]) in unrolled))
    leaves = [id(iv) for iv in stage.leaf_iter_vars]
    ric, first_tap = op.reduce_axis[0], op.reduce_axis[1]
    inside = leaves.index(id(first_tap)) < leaves.index(id(ric))
    return dict(out, reduce_order=IC_INSIDE_WINDOW if inside else IC_OUTSIDE_WINDOW,
                unroll_kw=int(id(op.reduce_axis[-2]) in unrolled))


def conv_nd_nchwc_valid(cfg: Mapping[str, Any], op: ComputeOp, target: Target) -> bool:
    vectors = cfg["ow_tile"] * cfg.get("oc_tile", 1) * cfg.get("oh_tile", 1)
    body = vectors * (op.attrs["kernel"][-1] if cfg.get("unroll_kw") else 1)
    return vectors <= MAX_ACCUMULATOR_VECTORS and body <= MAX_UNROLLED_FMAS


def apply_conv_nd_nchwc(sch: Schedule, outs: Sequence[Tensor], target: Target, cfg: Mapping[str, Any]) -> None:
    schedule_conv_nd_nchwc(sch, outs, target, **{k: int(v) for k, v in cfg.items()})


register_template(Template("ConvNDNCHWc", "conv_nd_nchwc", define_conv_nd_nchwc, apply_conv_nd_nchwc,
                           read_conv_nd_nchwc_default, conv_nd_nchwc_valid))
