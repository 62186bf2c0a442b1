"""Tuning templates of the 8-bit kernels: the packed ones' `int8_dot` register tile (rows x column blocks of
intrinsic calls) and loop order (weight panels outermost or not), ConvInteger's conv tiles and the channels-last
depthwise conv's columns (schedules/integer.py)."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..kernels.integer_depthwise import PAD_TAG
from ..kernels.schedules.integer import (MAX_DEPTHWISE_COLUMNS, MAX_DEPTHWISE_ROWS, schedule_conv_integer,
                                         schedule_depthwise_blocked, schedule_packed_integer, weights_outweigh_data)
from ..kernels.schedules.util import inputs_tagged
from ..target import Target
from ..te.schedule import Schedule, Split, Stage
from ..te.tensor import ComputeOp, Tensor
from ..te.intrinsics import get_intrinsic
from .space import ConfigSpace
from .templates import Template, conv_valid, define_conv, read_conv_default, register_template, split_factor

MAX_TILE = 8  # rows, and column blocks, per register tile


def _blocks(op: ComputeOp) -> int:
    return op.axis[-1].extent // get_intrinsic(op.attrs["intrinsic"]).lanes


def _registers(target: Target) -> int:
    return 32 if target.vector_bits >= 512 else 16


def define_int8_dot(op: ComputeOp, target: Target, default: Mapping[str, int]) -> ConfigSpace:
    """Only tiles that divide both extents: a guard would split the nest tensorize replaces."""
    space = ConfigSpace()
    rows, blocks = op.axis[-2].extent, _blocks(op)
    space.define_knob("rows", sorted({r for r in range(1, MAX_TILE + 1) if rows % r == 0} | {default["rows"]}))
    space.define_knob("col_blocks", sorted({c for c in range(1, MAX_TILE + 1) if blocks % c == 0}
                                           | {default["col_blocks"]}))
    space.define_knob("weights_outer", [0, 1])  # column blocks outermost: each tile's weight panels stay in L2
    return space


def read_int8_dot_default(stage: Stage) -> dict:
    op = stage.op
    outer = int(op.attrs.get("conv_columns") is not None and weights_outweigh_data(op))  # the schedule's default
    if stage.attach is not None:  # computed per tile of the output (accumulate_in_output_tiles): the tile is its split
        output, lanes = stage.attach[0], get_intrinsic(op.attrs["intrinsic"]).lanes
        *_, x, o = output.op.axis
        return {"rows": split_factor(output, x) or 1, "col_blocks": (split_factor(output, o) or lanes) // lanes,
                "weights_outer": outer}
    *_, i, j = op.axis
    blocks = next((r.outer for r in stage.relations if isinstance(r, Split) and r.parent is j), None)
    return {"rows": split_factor(stage, i) or 1,
            "col_blocks": next((r.factor for r in stage.relations if isinstance(r, Split) and r.parent is blocks), 1),
            "weights_outer": outer}


def int8_dot_valid(cfg: Mapping[str, Any], op: ComputeOp, target: Target) -> bool:
    # Accumulators plus one weight vector and one broadcast must fit the register file.
    return cfg["rows"] * cfg["col_blocks"] + 2 <= _registers(target)


def apply_int8_dot(sch: Schedule, outs: Sequence[Tensor], target: Target, cfg: Mapping[str, Any]) -> None:
    schedule_packed_integer(sch, outs, target, **{k: int(v) for k, v in cfg.items()})


for _op in ("MatMulIntegerPacked", "ConvIntegerPacked", "ConvIntegerPackedNCHWc"):
    register_template(Template(_op, "int8_dot", define_int8_dot, apply_int8_dot, read_int8_dot_default, int8_dot_valid))


def define_conv_integer(op: ComputeOp, target: Target, default: Mapping[str, int]) -> ConfigSpace:
    """A depthwise ConvInteger (integer_depthwise.py) tiles its columns only; others take the float conv's knobs."""
    space = define_conv(op, target, default)
    if inputs_tagged(op, PAD_TAG):
        space.knobs = [k for k in space.knobs if k.name == "ow_tile"]
    return space


def apply_conv_integer(sch: Schedule, outs: Sequence[Tensor], target: Target, cfg: Mapping[str, Any]) -> None:
    schedule_conv_integer(sch, outs, target, **{k: int(v) for k, v in cfg.items()})


register_template(Template("ConvInteger", "conv2d", define_conv_integer, apply_conv_integer, read_conv_default,
                           conv_valid))


def define_depthwise_blocked(op: ComputeOp, target: Target, default: Mapping[str, int]) -> ConfigSpace:
    """A channels-last depthwise conv's output columns per register tile (one accumulator vector each) and output
    rows per block of padded input rows."""
    space = ConfigSpace()
    for knob, axis, most in (("ow_tile", 3, MAX_DEPTHWISE_COLUMNS), ("oh_tile", 2, MAX_DEPTHWISE_ROWS)):
        size = op.axis[axis].extent
        space.define_knob(knob, sorted({t for t in range(1, most + 1) if size % t == 0} | {default[knob]}))
    return space


def read_depthwise_blocked_default(stage: Stage) -> dict:
    return {"ow_tile": split_factor(stage, stage.op.axis[3]) or 1, "oh_tile": split_factor(stage, stage.op.axis[2]) or 1}


def apply_depthwise_blocked(sch: Schedule, outs: Sequence[Tensor], target: Target, cfg: Mapping[str, Any]) -> None:
    schedule_depthwise_blocked(sch, outs, target, **{k: int(v) for k, v in cfg.items()})


register_template(Template("DepthwiseConvIntegerNCHWc", "int8_dw", define_depthwise_blocked, apply_depthwise_blocked,
                           read_depthwise_blocked_default, lambda cfg, op, target: True))
