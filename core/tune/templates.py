"""Tunable schedule templates, one registry keyed by graph op: each defines the config space of a
workload's anchor stage and schedules it with a config (through the schedules' knob parameters).

A template reads its heuristic default back from the default schedule's splits, so the untuned
kernel is always one point of the space and the tuner can only match or beat it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

from ..kernels.schedules.conv2d import schedule_conv2d
from ..kernels.schedules.conv2d_nchwc import IC_INSIDE_WINDOW, IC_OUTSIDE_WINDOW, schedule_conv2d_nchwc
from ..kernels.schedules.conv2d_winograd import schedule_conv2d_winograd
from ..kernels.schedules.conv_nd import schedule_conv_nd
from ..kernels.schedules.matmul import GEMV_SEGMENT, schedule_matmul
from ..kernels.schedules.generic import extent, worth_parallel
from ..kernels.schedules.util import find_ops
from ..target import CPU_KIND, Target
from ..te.schedule import Fuse, Schedule, Split, Stage
from ..te.tensor import ComputeOp, IterVar, Tensor
from ..tir.stmt import ForKind
from .space import ConfigSpace

DefineFn = Callable[[ComputeOp, Target, Mapping[str, int]], ConfigSpace]
ApplyFn = Callable[[Schedule, Sequence[Tensor], Target, Mapping[str, Any]], None]
MAX_ACCUMULATOR_VECTORS = 32  # a tile beyond this spills everything and takes LLVM seconds to build


@dataclass(frozen=True)
class Template:
    """How one op is tuned: `tag` names the stage whose loops the knobs shape."""

    op: str
    tag: str
    define: DefineFn  # (anchor stage, target, heuristic knob values) -> space containing them
    apply: ApplyFn  # (schedule, kernel outputs, target, knob values) -> scheduled
    read_default: Callable[[Stage], dict]  # default-scheduled anchor stage -> its knob values
    valid: Callable[[Mapping[str, Any], ComputeOp, Target], bool] = lambda cfg, op, target: True
    target_kind: str = CPU_KIND  # the schedules it drives (CUDA_KIND: core/backends/cuda/templates.py)
    # Kernels whose speed depends on their data (tree walks: the paths the tables and inputs take) are
    # measured on the model's own constant inputs and several draws of the others (core/tune/measure.py).
    real_inputs: bool = False


_TEMPLATES: dict[tuple[str, str], Template] = {}


def register_template(template: Template) -> Template:
    key = (template.op, template.target_kind)
    if key in _TEMPLATES:
        raise ValueError(f"tuning template for {template.op} on {template.target_kind} registered twice")
    _TEMPLATES[key] = template
    return template


def get_template(op: str, target: Target) -> Optional[Template]:
    """The op's template for `target.kind` (another kind's are registered by its Backend.load_templates first)."""
    return _TEMPLATES.get((op, target.kind))


def tunable_ops(target: Target) -> list[str]:
    return sorted(op for op, kind in _TEMPLATES if kind == target.kind)


# -- reading a default schedule back ------------------------------------------------------------
def split_factor(stage: Stage, axis: IterVar) -> Optional[int]:
    """The inner factor of the first split of `axis` (or of an axis fused from it), if any."""
    derived = {id(axis)}
    for rel in stage.relations:
        if isinstance(rel, Fuse) and (id(rel.outer) in derived or id(rel.inner) in derived):
            derived.add(id(rel.fused))
        elif isinstance(rel, Split) and id(rel.parent) in derived:
            return rel.factor
    return None


def _inner(f: tuple[int, ...]) -> int:
    return f[-1]


def _tiles_upto(extent: int, low: int, high: int, default: int) -> list[tuple[int, int]]:
    """Exact splits of `extent` whose inner factor lies in [low, high], plus the heuristic's own."""
    out = [(extent // d, d) for d in range(1, extent + 1) if extent % d == 0 and low <= d <= high]
    if default and (-(-extent // default), default) not in out:
        out.append((-(-extent // default), default))
    return out


# -- Conv ---------------------------------------------------------------------------------------
def _conv_kind(op: ComputeOp) -> str:
    if op.attrs.get("depthwise") or op.attrs.get("group", 1) > 1:
        return "grouped"
    if op.attrs.get("pointwise") and op.reduce_axis[0].extent >= 64:
        return "gemm"
    return "direct"


def _conv_columns(op: ComputeOp) -> int:
    """The extent the column tile splits: a non-flat 1x1 conv fuses rows and columns first."""
    _, _, oh, ow = op.axis
    return oh.extent * ow.extent if op.attrs.get("pointwise") and not op.attrs.get("flat") else ow.extent


def define_conv(op: ComputeOp, target: Target, default: Mapping[str, int]) -> ConfigSpace:
    space = ConfigSpace()
    lanes = target.lanes(op.dtype)
    kind = _conv_kind(op)
    columns = _conv_columns(op)
    low = min(2, columns)
    space.define_knob("ow_tile", [_inner(f) for f in _tiles_upto(columns, low, 4 * lanes, default["ow_tile"])])
    if kind != "grouped":
        oc = op.axis[1].extent
        space.define_knob("oc_tile", [_inner(f) for f in _tiles_upto(oc, 1, 32, default["oc_tile"])])
    if kind != "gemm":
        oh = op.axis[2].extent
        space.define_knob("oh_tile", [_inner(f) for f in _tiles_upto(oh, 1, 8, default["oh_tile"])])
    else:
        rc = op.reduce_axis[0].extent
        space.define_knob("rc_tile", [_inner(f) for f in _tiles_upto(rc, min(16, rc), 512, default["rc_tile"])])
    return space


def read_conv_default(stage: Stage) -> dict:
    op = stage.op
    _, oc, oh, ow = op.axis
    return {"ow_tile": split_factor(stage, ow) or _conv_columns(op), "oc_tile": split_factor(stage, oc) or 1,
            "oh_tile": split_factor(stage, oh) or 1,
            "rc_tile": split_factor(stage, op.reduce_axis[0]) or op.reduce_axis[0].extent}


def conv_valid(cfg: Mapping[str, Any], op: ComputeOp, target: Target) -> bool:
    vectors = -(-cfg["ow_tile"] // target.lanes(op.dtype))
    return vectors * cfg.get("oc_tile", 1) * cfg.get("oh_tile", 1) <= MAX_ACCUMULATOR_VECTORS


def apply_conv(sch: Schedule, outs: Sequence[Tensor], target: Target, cfg: Mapping[str, Any]) -> None:
    schedule_conv2d(sch, outs, target, **{k: int(v) for k, v in cfg.items()})


# -- ConvND (3-D convs) -------------------------------------------------------------------------
def define_conv_nd(op: ComputeOp, target: Target, default: Mapping[str, int]) -> ConfigSpace:
    """Register tile of schedule_conv_nd: ow_tile columns x oc_tile channels x oh_tile rows (oc whole
    when grouped: the input channel depends on it)."""
    space = ConfigSpace()
    _, oc, *rows, ow = op.axis
    lanes = target.lanes(op.dtype)
    space.define_knob("ow_tile", [_inner(f) for f in _tiles_upto(ow.extent, min(2, ow.extent), 4 * lanes,
                                                                   default["ow_tile"])])
    if op.attrs.get("group", 1) == 1:
        space.define_knob("oc_tile", [_inner(f) for f in _tiles_upto(oc.extent, 1, 32, default["oc_tile"])])
    if rows:
        space.define_knob("oh_tile", [_inner(f) for f in _tiles_upto(rows[-1].extent, 1, 8, default["oh_tile"])])
    return space


def read_conv_nd_default(stage: Stage) -> dict:
    _, oc, *rows, ow = stage.op.axis
    return {"ow_tile": split_factor(stage, ow) or ow.extent, "oc_tile": split_factor(stage, oc) or 1,
            "oh_tile": (split_factor(stage, rows[-1]) or 1) if rows else 1}


def apply_conv_nd(sch: Schedule, outs: Sequence[Tensor], target: Target, cfg: Mapping[str, Any]) -> None:
    schedule_conv_nd(sch, outs, target, **{k: int(v) for k, v in cfg.items()})


# -- Conv2dNCHWc (blocked layout) ----------------------------------------------------------------
MAX_TILE_ROWS = 8  # oh_tile: rows beyond this only shrink the parallel loop
MAX_IC_TILE = 8  # input-channel blocks per pragma-unrolled step
# Vector FMAs in the unrolled reduction body (tile x ic_tile x unrolled kw x unrolled ib): measured
# builds (znver3, machine loaded 2x) of resnet18 candidates: 768 ~1.9 s, 1536-2048 2.7-3.7 s, 512
# 1.1-2.0 s, 336-448 0.5-1.1 s.
MAX_UNROLLED_FMAS = 512


def _divisors(extent: int, high: int) -> list[int]:
    return [d for d in range(1, min(extent, high) + 1) if extent % d == 0]


def define_conv_nchwc(op: ComputeOp, target: Target, default: Mapping[str, int]) -> ConfigSpace:
    """Register tile: ow_tile columns x oc_tile channel blocks x oh_tile rows (exact splits only);
    reduction: where the input-channel loop sits (reduce_order), how many of its blocks one
    pragma-unrolled step takes (ic_tile), and which inner loops are unrolled (unroll_kw, unroll_inner).
    A knob that cannot change the loop nest of this workload (a 1x1 window, one input block) is left out."""
    space = ConfigSpace()
    _, ocb, oh, ow, _ = op.axis
    space.define_knob("ow_tile", sorted(set(_divisors(ow.extent, MAX_ACCUMULATOR_VECTORS)) | {default["ow_tile"]}))
    if not op.attrs.get("depthwise"):
        space.define_knob("oc_tile", sorted(set(_divisors(ocb.extent, 8)) | {default["oc_tile"]}))
    space.define_knob("oh_tile", sorted(set(_divisors(oh.extent, MAX_TILE_ROWS)) | {default["oh_tile"]}))
    kh, kw = op.attrs["kernel"]
    if op.attrs.get("depthwise"):
        if kw > 1:
            space.define_knob("unroll_kw", [0, 1])
        return space
    icb = op.reduce_axis[0].extent
    if icb > 1 and kh * kw > 1:
        space.define_knob("reduce_order", [IC_OUTSIDE_WINDOW, IC_INSIDE_WINDOW])
    if icb > 1:
        space.define_knob("ic_tile", _divisors(icb, MAX_IC_TILE))
    if kw > 1:
        space.define_knob("unroll_kw", [0, 1])
    space.define_knob("unroll_inner", [0, 1])
    return space


def read_conv_nchwc_default(stage: Stage) -> dict:
    op = stage.op
    _, ocb, oh, ow, _ = op.axis
    unrolled = {id(iv) for iv, kind in stage.annotations.items() if kind is ForKind.UNROLLED}
    out = {"ow_tile": split_factor(stage, ow) or ow.extent, "oc_tile": split_factor(stage, ocb) or 1,
           "oh_tile": split_factor(stage, oh) or 1}
    if op.attrs.get("depthwise"):
        return dict(out, unroll_kw=int(id(op.reduce_axis[1]) in unrolled))
    ric, rkh, rkw, rib = op.reduce_axis
    ic_inner = next((r.inner for r in stage.relations if isinstance(r, Split) and r.parent is ric), None)
    leaves = [id(iv) for iv in stage.leaf_iter_vars]
    inside = ic_inner is not None and leaves.index(id(rkh)) < leaves.index(id(ic_inner))
    return dict(out, reduce_order=IC_INSIDE_WINDOW if inside else IC_OUTSIDE_WINDOW,
                ic_tile=split_factor(stage, ric) or 1, unroll_kw=int(id(rkw) in unrolled),
                unroll_inner=int(id(rib) in unrolled))


def conv_nchwc_valid(cfg: Mapping[str, Any], op: ComputeOp, target: Target) -> bool:
    # One vector accumulator per (column, channel block, row) of the tile; the unrolled body (the
    # tile's FMAs times every unrolled reduction loop) must stay small enough to build quickly.
    vectors = cfg["ow_tile"] * cfg.get("oc_tile", 1) * cfg.get("oh_tile", 1)
    if vectors > MAX_ACCUMULATOR_VECTORS:
        return False
    kh, kw = op.attrs["kernel"]
    body = vectors * cfg.get("ic_tile", 1) * (kw if cfg.get("unroll_kw") else 1)
    if cfg.get("unroll_inner"):
        body *= op.reduce_axis[-1].extent
    return body <= MAX_UNROLLED_FMAS


def apply_conv_nchwc(sch: Schedule, outs: Sequence[Tensor], target: Target, cfg: Mapping[str, Any]) -> None:
    schedule_conv2d_nchwc(sch, outs, target, **{k: int(v) for k, v in cfg.items()})


# -- Conv2dWinogradNCHWc: the batched GEMM between the transforms ------------------------------
def define_winograd(op: ComputeOp, target: Target, default: Mapping[str, int]) -> ConfigSpace:
    """Register tile of the GEMM: tile_t transformed tiles x oc_t channel blocks (exact splits);
    unroll_inner unrolls the input-channel lanes."""
    space = ConfigSpace()
    _, _, ocb, tiles, _ = op.axis
    space.define_knob("tile_t", sorted(set(_divisors(tiles.extent, 16)) | {default["tile_t"]}))
    space.define_knob("oc_t", sorted(set(_divisors(ocb.extent, 8)) | {default["oc_t"]}))
    space.define_knob("unroll_inner", [0, 1])
    return space


def read_winograd_default(stage: Stage) -> dict:
    _, _, ocb, tiles, _ = stage.op.axis
    unrolled = {id(iv) for iv, kind in stage.annotations.items() if kind is ForKind.UNROLLED}
    return {"tile_t": split_factor(stage, tiles) or 1, "oc_t": split_factor(stage, ocb) or 1,
            "unroll_inner": int(id(stage.op.reduce_axis[1]) in unrolled)}


def winograd_valid(cfg: Mapping[str, Any], op: ComputeOp, target: Target) -> bool:
    vectors = cfg["tile_t"] * cfg["oc_t"]
    body = vectors * (op.reduce_axis[1].extent if cfg.get("unroll_inner") else 1)
    return vectors <= MAX_ACCUMULATOR_VECTORS and body <= MAX_UNROLLED_FMAS


def apply_winograd(sch: Schedule, outs: Sequence[Tensor], target: Target, cfg: Mapping[str, Any]) -> None:
    schedule_conv2d_winograd(sch, outs, target, **{k: int(v) for k, v in cfg.items()})


# -- MatMul -------------------------------------------------------------------------------------
def define_matmul(op: ComputeOp, target: Target, default: Mapping[str, int]) -> ConfigSpace:
    if op.attrs.get("packed"):
        return _packed_space(op, target, default)
    space = ConfigSpace()
    *_, i, j = op.axis
    (k,) = op.reduce_axis
    lanes = target.lanes(op.dtype)
    space.define_knob("row", [_inner(f) for f in _tiles_upto(i.extent, 1, 12, default["row"])])
    cols = [_inner(f) for f in _tiles_upto(j.extent, min(lanes // 2, j.extent), 8 * lanes, default["col"])]
    space.define_knob("col", cols)
    space.define_knob("k_tile", [_inner(f) for f in _tiles_upto(k.extent, min(16, k.extent), k.extent, default["k_tile"])])
    # An unroll pragma on the innermost reduce loop (LLVM unrolls it k_unroll times; 1 = LLVM decides).
    space.define_knob("k_unroll", sorted({1, 2, 4, 8} | {default["k_unroll"]}))
    return space


def _packed_space(op: ComputeOp, target: Target, default: Mapping[str, int]) -> ConfigSpace:
    """Over packed B: rows dividing the padded M, columns dividing the panel (whole vectors)."""
    space = ConfigSpace()
    *_, i, _ = op.axis
    (k,) = op.reduce_axis
    lanes, panel = target.lanes(op.dtype), op.attrs["panel"]
    space.define_knob("row", [_inner(f) for f in _tiles_upto(i.extent, 1, 8, default["row"])])
    space.define_knob("col", sorted({c for c in (lanes, 2 * lanes, panel) if panel % c == 0} | {default["col"]}))
    space.define_knob("k_tile", [_inner(f) for f in _tiles_upto(k.extent, min(64, k.extent), k.extent, default["k_tile"])])
    # Row tiles per cache block (mc = row x row_block rows of A stay in L2); a last partial block is guarded.
    space.define_knob("row_block", sorted({b for b in (1, 2, 4, 8, 12, 16, 20, 32) if b <= i.extent}
                                          | {default["row_block"]}))
    # Column blocks (nc = panels / col_blocks) only cut the parallel loop; dividing the panel count
    # keeps every block whole whatever the micro-tile's width.
    if worth_parallel(extent(op.axis) * k.extent, target):
        panels = op.axis[-1].extent // panel
        space.define_knob("col_blocks", sorted(set(_divisors(panels, 16)) | {default["col_blocks"]}))
    space.define_knob("k_unroll", sorted({1, 2, 4, 8} | {default["k_unroll"]}))
    return space


def read_matmul_default(stage: Stage) -> dict:
    *_, i, j = stage.op.axis
    (k,) = stage.op.reduce_axis
    out = {"row": split_factor(stage, i) or i.extent, "col": split_factor(stage, j) or j.extent,
           "k_tile": split_factor(stage, k) or k.extent,
           "k_unroll": max((p.get("pragma_unroll", 1) for p in stage.pragmas.values()), default=1)}
    if stage.op.attrs.get("packed"):  # the second split of i's outer part is the row block
        tiles = next((r.outer for r in stage.relations if isinstance(r, Split) and r.parent is i), None)
        out["row_block"] = next((r.factor for r in stage.relations if isinstance(r, Split) and r.parent is tiles), 1)
        panels = next((r.outer for r in stage.relations if isinstance(r, Split) and r.parent is j), None)
        block = next((r for r in stage.relations if isinstance(r, Split) and r.parent is panels), None)
        out["col_blocks"] = block.outer.extent if block is not None else 1
    return out


def matmul_valid(cfg: Mapping[str, Any], op: ComputeOp, target: Target) -> bool:
    if op.axis[-2].extent == 1 and not op.attrs.get("packed"):  # a GEMV's row segment is a loop over vectors
        return cfg["col"] <= GEMV_SEGMENT
    return cfg["row"] * -(-cfg["col"] // target.lanes(op.dtype)) <= MAX_ACCUMULATOR_VECTORS


def apply_matmul(sch: Schedule, outs: Sequence[Tensor], target: Target, cfg: Mapping[str, Any]) -> None:
    schedule_matmul(sch, outs, target, **{k: int(v) for k, v in cfg.items()})


register_template(Template("Conv", "conv2d", define_conv, apply_conv, read_conv_default, conv_valid))
register_template(Template("ConvND", "conv_nd", define_conv_nd, apply_conv_nd, read_conv_nd_default, conv_valid))
register_template(Template("Conv2dNCHWc", "conv2d_nchwc", define_conv_nchwc, apply_conv_nchwc, read_conv_nchwc_default,
                           conv_nchwc_valid))
register_template(Template("Conv2dWinogradNCHWc", "winograd_gemm", define_winograd, apply_winograd,
                           read_winograd_default, winograd_valid))
register_template(Template("MatMul", "matmul", define_matmul, apply_matmul, read_matmul_default, matmul_valid))


def anchor_stage(sch: Schedule, outs: Sequence[Tensor], template: Template) -> Optional[Stage]:
    ops = find_ops(outs, [template.tag])
    return sch[Tensor(ops[-1])] if ops else None
