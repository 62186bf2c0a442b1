"""CPU schedules of the blocked layout: Conv2dNCHWc (TVM's conv2d_NCHWc register tile), blocked pools.

Conv loop order: (n, oc.o, oh.o) fused and parallel, ow.o | ic, kh, kw, ib | oh.i, oc.i, ow.i
(unrolled) | oc block (vectorized); tuning knobs move ic inside the window, split it (an unrolled
inner step), and unroll kw and ib. A tile of oh_tile x oc_tile x ow_tile vector accumulators stays
in registers for the whole reduction; each step loads oc_tile weight vectors (contiguous, packed
OIHW[x]i[y]o) and broadcasts oh_tile x ow_tile input scalars, for as many FMAs as accumulators. A
1x1 conv is the same tile over pixels x channels: a GEMM micro-kernel with K = ic x ib.
Depthwise convs vectorize the shared channel block: (n, c, oh) parallel | padded input rows | ow.o |
kh, kw | ow.i | c.i.
"""
from __future__ import annotations

from typing import Optional, Sequence

from ...target import Target
from ...te.schedule import Schedule, Stage
from ...te.tensor import ComputeOp, IterVar, Tensor
from .epilogue import schedule_epilogue
from .generic import extent, output_stage, parallelize, reduce_stage, window_pad_stage, worth_parallel
from .util import find_ops, inputs_tagged, largest_divisor

MAX_ACCUMULATORS = 12  # of the 16 vector registers (AVX2); the rest hold the weights and broadcasts
MAX_COLUMNS = 8  # unrolled output columns per tile (TVM's reg_n)


def default_tiles(op: ComputeOp, target: Target) -> tuple[int, int, int]:
    """(ow_tile, oc_tile, oh_tile): the most accumulators within budget, exact splits only (a guard
    in an unrolled tile serializes it); ties go to more channel blocks (fewer broadcasts per FMA).
    A grouped conv's channel tile stays inside a group: blocks of different groups read different
    inputs, so they share no broadcasts (regnet's and resnext's grouped 3x3 convs, one block per
    group, x86-64-v3: 1.0-1.3x faster with oc_tile 1 and 2 rows than with 4 blocks of 4 columns)."""
    ocb, oh, ow = (a.extent for a in (op.axis[1], *op.axis[-3:-1]))  # also ConvNDNCHWc's (n, oc, od, oh, ow, ob)
    if op.attrs.get("depthwise"):
        return largest_divisor(ow, list(range(MAX_COLUMNS, 0, -1))) or 1, 1, 1
    blocks_per_group = ocb // op.attrs.get("group", 1)
    best = (0, 0, 0, 0)
    for oc_t in (4, 3, 2, 1):
        if blocks_per_group % oc_t:
            continue
        for oh_t in (1, 2):
            if oh % oh_t or oc_t * oh_t > MAX_ACCUMULATORS:
                continue
            budget = min(MAX_COLUMNS, MAX_ACCUMULATORS // (oc_t * oh_t))
            ow_t = largest_divisor(ow, list(range(budget, 0, -1))) or 1
            score = (ow_t * oc_t * oh_t, oc_t, -oh_t, ow_t)
            best = max(best, score)
    _, oc_t, neg_oh_t, ow_t = best
    return ow_t, oc_t, -neg_oh_t


# reduce_order knob values: where the input-channel-block loop (its outer part, when ic_tile splits
# it) sits relative to the window loops.
IC_OUTSIDE_WINDOW, IC_INSIDE_WINDOW = 0, 1


def schedule_conv_nchwc_stage(sch: Schedule, op: ComputeOp, target: Target, ow_tile: Optional[int] = None,
                              oc_tile: Optional[int] = None, oh_tile: Optional[int] = None,
                              reduce_order: int = IC_OUTSIDE_WINDOW, ic_tile: int = 1, unroll_kw: int = 0,
                              unroll_inner: int = 0) -> None:
    """Schedule one conv2d_nchwc stage. The knobs (core/tune/templates.py; defaults = the heuristic):
    ow_tile, oc_tile, oh_tile: the register tile (default_tiles);
    reduce_order: IC_OUTSIDE_WINDOW (ic.o, ic.i, kh, kw, ib) or IC_INSIDE_WINDOW (ic.o, kh, kw, ic.i, ib);
    ic_tile: input-channel blocks per inner step (ic.i), unrolled by an LLVM pragma when > 1;
    unroll_kw: unroll the window-column loop at lowering (its input offsets become constants);
    unroll_inner: unroll the innermost reduction (the input-channel lanes ib).
    Depthwise convs take the tiles (no oc_tile) and unroll_kw."""
    stage = sch[Tensor(op)]
    n, oc, oh, ow, ob = op.axis
    d_ow, d_oc, d_oh = default_tiles(op, target)
    owo, owi = stage.split(ow, ow_tile or d_ow)
    oho, ohi = stage.split(oh, oh_tile or d_oh)
    if op.attrs.get("depthwise"):
        rkh, rkw = op.reduce_axis
        stage.reorder(n, oc, oho, owo, rkh, rkw, ohi, owi, ob)
        outer = [n, oc, oho]
        if unroll_kw:
            stage.unroll(rkw)
    else:
        ric, rkh, rkw, rib = op.reduce_axis
        oco, oci = stage.split(oc, oc_tile or d_oc)
        rico, rici = stage.split(ric, ic_tile) if ic_tile > 1 else (ric, None)
        window = [rkh, rkw]
        if reduce_order == IC_INSIDE_WINDOW:
            reduce = [rico, *window] + ([rici] if rici is not None else []) + [rib]
        else:
            reduce = [rico] + ([rici] if rici is not None else []) + [*window, rib]
        stage.reorder(n, oco, oho, owo, *reduce, ohi, oci, owi, ob)
        stage.unroll(oci)
        outer = [n, oco, oho]
        if rici is not None:
            stage.pragma(rici, "unroll", ic_tile)
        if unroll_kw:
            stage.unroll(rkw)
        if unroll_inner:
            stage.unroll(rib)
    stage.unroll(ohi)
    stage.unroll(owi)
    stage.vectorize(ob)
    if worth_parallel(extent(op.axis) * extent(op.reduce_axis), target):
        parallelize(stage, outer, target)
    if op.attrs.get("depthwise"):
        pad_rows_at(sch, op, owo, "conv2d_nchwc_pad")


def pad_rows_at(sch: Schedule, op: ComputeOp, columns: IterVar, pad_tag: str) -> None:
    """A window op with one channel block per output (depthwise conv, pool) pads only the input rows
    of its current output rows, into a buffer that stays in L1, computed at the (fused) row loop
    just outside `columns`: padding the whole input first was a pass over memory as long as the op
    itself (2.4-2.7x slower for mobilenet_v2's stride-2 depthwise layers, 4.8x for resnet18's MaxPool)."""
    stage = sch[Tensor(op)]
    rows = stage.leaf_iter_vars[stage.leaf_iter_vars.index(columns) - 1]
    for pad_op in inputs_tagged(op, pad_tag):
        pad = sch[Tensor(pad_op)]
        pad.compute_at(stage, rows)
        pad.vectorize(pad.leaf_iter_vars[-1])


def blocked_pad_stage(stage: Stage, target: Target) -> None:
    """The padded NCHW[x]c input: (n, c, row) fused and parallel | column | block (vectorized). The
    border test depends on the pixel only, never on the lane, so each pixel is one whole vector
    (the generic pad schedule's scalar loop over fused pixels measured 5-10x slower than the conv)."""
    leaves = list(stage.leaf_iter_vars)
    if len(leaves) != 5:
        window_pad_stage(stage, target)
        return
    stage.vectorize(leaves[-1])
    if worth_parallel(extent(leaves), target):
        parallelize(stage, leaves[:3], target)


def schedule_conv2d_nchwc(sch: Schedule, outs: Sequence[Tensor], target: Target, **knobs: int) -> None:
    """`knobs` (see schedule_conv_nchwc_stage) come from a tuned config (core/tune/templates.py)."""
    for op in find_ops(outs, ["conv2d_nchwc"]):
        schedule_conv_nchwc_stage(sch, op, target, **knobs)
        for pad in inputs_tagged(op, "conv2d_nchwc_pad"):
            if sch[Tensor(pad)].attach is None:
                blocked_pad_stage(sch[Tensor(pad)], target)
    for op in find_ops(outs, ["conv2d_nchwc_bias"]):
        if any(t.op is op for t in outs):
            # The bias (or crop) is the kernel's output: add it to each register tile as it is finished
            # (the injective pass over the fused 5-D output cost 1-3x the conv: a div/mod per vector).
            schedule_epilogue(sch, [Tensor(op)], target)
        else:
            output_stage(sch, op, outs, target)


def schedule_pool_nchwc(sch: Schedule, outs: Sequence[Tensor], target: Target) -> None:
    """(n, c, oh) parallel | padded rows | ow.o | kh, kw | ow.i (unrolled) | block (vectorized): as a
    depthwise conv, several output pixels reduce side by side (independent max/add chains) and only
    the input rows of the current output row are padded."""
    for op in find_ops(outs, ["pool_nchwc"]):
        stage = sch[Tensor(op)]
        n, c, oh, ow, b = op.axis
        rkh, rkw = op.reduce_axis
        owo, owi = stage.split(ow, largest_divisor(ow.extent, list(range(MAX_COLUMNS, 0, -1))) or 1)
        stage.reorder(n, c, oh, owo, rkh, rkw, owi, b)
        stage.unroll(owi)
        stage.vectorize(b)
        if worth_parallel(extent(op.axis) * extent(op.reduce_axis), target):
            parallelize(stage, [n, c, oh], target)
        pad_rows_at(sch, op, owo, "pool_nchwc_pad")
    for op in find_ops(outs, ["pool_nchwc_pad"]):
        if sch[Tensor(op)].attach is None:
            window_pad_stage(sch[Tensor(op)], target)
    for op in find_ops(outs, ["pool_nchwc_out"]):
        output_stage(sch, op, outs, target)


def schedule_global_pool_nchwc(sch: Schedule, outs: Sequence[Tensor], target: Target) -> None:
    for op in find_ops(outs, ["reduce"]):
        reduce_stage(sch[Tensor(op)], target)  # the block is inner_spatial: vectorized under the reduction
    for op in find_ops(outs, ["pool"]):
        output_stage(sch, op, outs, target)
