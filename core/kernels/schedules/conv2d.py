"""CPU schedule of Conv: a register tile of output channels x rows x columns around the reduction.

Loop order n, oc.o, oh.o, ow.o | ic, kh, kw | oh.i, oc.i (unrolled), ow.i (vectorized): each tile
keeps its accumulators in vector registers across the whole reduction (buffers are noalias, so LLVM
promotes them), loads ow.i input columns once per (ic, kh, kw) and row, and broadcasts one weight
per output channel. 1x1 convs tile the flattened image and run as a GEMM (pixel panels outermost);
grouped and depthwise convs tile only the columns. Threads take the fused outer tiles; the pad
stage is a parallel copy. The compute already made rows whole vectors (widened widths, stride
phases, flattened pixels), so no tile needs a guard.
"""
from __future__ import annotations

from typing import Optional, Sequence

from ...target import Target
from ...te.schedule import Schedule
from ...te.tensor import ComputeOp, Tensor
from .generic import extent, output_stage, parallelize, window_pad_stage, worth_parallel
from .util import divisor_near, find_ops, inputs_tagged, largest_divisor

K_TILE_MIN, K_TILE_MAX = 128, 256  # input channels per pass of a long 1x1 reduction (panel <= 16 KB)
MAX_ACCUMULATORS = 12  # of the 16 vector registers (AVX2/NEON: 16); the rest hold loads and broadcasts


def column_tile(ow: int, lanes: int) -> int:
    """Output columns per tile: two, one or half a vector register's worth, dividing ow when possible
    (a guard in the vectorized loop would make it scalar; odd vector lengths split badly)."""
    exact = largest_divisor(ow, [2 * lanes, lanes] + ([lanes // 2] if lanes >= 8 else []))
    if exact:
        return exact
    if ow <= 2 * lanes:
        return ow
    return divisor_near(ow, lanes // 2 + 1, 2 * lanes) or lanes


def row_tile(oh: int, vectors: int) -> int:
    """Output rows per tile: two when a row is one vector, so that each weight broadcast feeds two
    FMAs (one vector row needs more loads per FMA than the two load ports give)."""
    return 2 if vectors == 1 and oh % 2 == 0 else 1


def channel_tile(oc: int, vectors: int) -> int:
    """Output channels per tile: the most that divide oc within the accumulator budget."""
    budget = max(1, MAX_ACCUMULATORS // vectors)
    return largest_divisor(oc, [c for c in (8, 6, 4, 3, 2, 1) if c <= budget]) or 1


def schedule_conv_stage(sch: Schedule, op: ComputeOp, target: Target, ow_tile: Optional[int] = None,
                        oc_tile: Optional[int] = None, oh_tile: Optional[int] = None,
                        rc_tile: Optional[int] = None) -> None:
    """Schedule one conv2d stage; the optional tiles are knobs (defaults derive from target and shape)."""
    stage = sch[Tensor(op)]
    n, oc, oh, ow = stage.op.axis
    rc, *window = stage.op.reduce_axis
    if op.attrs.get("pointwise") and not op.attrs.get("flat"):
        # A 1x1 conv reads the image as one contiguous run of pixels: tile that instead of rows.
        ow = stage.fuse(oh, ow)
        oh = None
    lanes = target.lanes(op.dtype)
    owt = ow_tile or column_tile(ow.extent, lanes)
    owo, owi = stage.split(ow, owt)
    vectors = -(-owt // lanes)
    grouped = bool(op.attrs.get("depthwise")) or op.attrs.get("group", 1) > 1
    rows_in_tile = oh_tile or (row_tile(oh.extent, vectors) if oh is not None and not grouped else 1)
    if oh is None:
        rows, tile_rows = [], []
    elif rows_in_tile > 1:
        oho, ohi = stage.split(oh, rows_in_tile)
        rows, tile_rows = [oho], [ohi]
        stage.unroll(ohi)
    else:
        rows, tile_rows = [oh], []
    if grouped:
        # Grouped: the input channel depends on oc, so keep oc whole and tile the columns only.
        stage.reorder(n, oc, *rows, owo, rc, *window, *tile_rows, owi)
        outer = [n, oc, *rows]
    elif op.attrs.get("pointwise") and rc.extent >= 64:
        # A 1x1 conv (K >= 64) is a GEMM: a panel of pixels (input channels x one tile of pixels) stays in
        # cache while every output-channel tile uses it; long reductions are cut into panels that
        # fit (measured 1.3-1.6x over channel tiles outermost). Threads take pixel tiles.
        oct = oc_tile or channel_tile(oc.extent, vectors * rows_in_tile)
        oco, oci = stage.split(oc, oct)
        depth = rc_tile or (divisor_near(rc.extent, K_TILE_MIN, K_TILE_MAX) if rc.extent > K_TILE_MAX * 2 else None)
        if depth and depth < rc.extent:
            rco, rci = stage.split(rc, depth)
            stage.reorder(n, *rows, owo, rco, oco, rci, *window, *tile_rows, oci, owi)
        else:
            stage.reorder(n, *rows, owo, oco, rc, *window, *tile_rows, oci, owi)
        stage.unroll(oci)
        outer = [n, *rows, owo]
    else:
        oct = oc_tile or channel_tile(oc.extent, vectors * rows_in_tile)
        oco, oci = stage.split(oc, oct)
        stage.reorder(n, oco, *rows, owo, rc, *window, *tile_rows, oci, owi)
        stage.unroll(oci)
        outer = [n, oco, *rows]
    if window and window[-1].extent <= 3:
        stage.unroll(window[-1])
    stage.vectorize(owi)
    work = extent(op.axis) * extent(op.reduce_axis)
    if worth_parallel(work, target):
        parallelize(stage, outer, target)


def schedule_conv2d(sch: Schedule, outs: Sequence[Tensor], target: Target, **knobs: int) -> None:
    """`knobs` (ow_tile, oc_tile, oh_tile, rc_tile) come from a tuned config (core/tune/templates.py)."""
    for op in find_ops(outs, ["conv2d"]):
        schedule_conv_stage(sch, op, target, **knobs)
        for pad in inputs_tagged(op, "conv2d_pad"):
            window_pad_stage(sch[Tensor(pad)], target)
    for op in find_ops(outs, ["conv2d_bias"]):
        output_stage(sch, op, outs, target)

