"""GPU Conv (NCHW; grouped and depthwise, strides, pads, dilations): a compute over the exact output
shape (none of the CPU's widened rows or flattened pixels), and a shared-memory tiled schedule.

Each block computes tile_f output channels x tile_y rows x tile_x columns of one image: threads are
(threadIdx.z, .y, .x) = (channels, rows, columns), each holding an f_reg x y_reg x x_reg register
tile (cache_write "local"). Per step of rc_tile input channels, the block's threads fetch the input
window and the weights the tile needs into shared memory together (consecutive threadIdx.x read
consecutive addresses), then every thread accumulates from there. The kernel's output stage (bias,
ReLU/Clip, residual Add: the fused epilogue) reads the register tile right where it is written back.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ....target import CUDA_KIND
from ....errors import ScheduleError, ShapeError
from ....graph.ir import TensorType
from ....target import Target
from ....te import tensor as te
from ....te.schedule import Schedule, Stage
from ....te.tensor import ComputeOp, Tensor, TensorRead
from ....tir.expr import Expr
from ....tir.functor import walk_expr
from ....kernels.common import attr, require
from ....kernels.conv2d import conv_out_size
from ....kernels.registry import register_compute
from ....kernels.transform import pad
from ....kernels.schedules.util import find_op, inputs_tagged
from . import conv2d_pointwise as pointwise
from .launch import cooperative_fetch, inline_intermediates, output_stages, reject_extern, thread_tiles
from .reduce import one_thread_per_output

SHARED_BUDGET = 24 * 1024  # bytes of shared memory per block: two blocks fit each SM's 48 KB at least
TARGET_BLOCKS = 264  # two blocks per SM of an H100 (132 SMs): fewer leaves SMs idle


def conv2d_gpu(x: te.Tensor, w: te.Tensor, strides: Sequence[int], pads: Sequence[int], dilations: Sequence[int],
               group: int) -> te.Tensor:
    """out[n, m, y, x] = sum over (rc, kh, kw) of padded[n, ic, y*sh + kh*dh, x*sw + kw*dw] * w[m, rc, kh, kw],
    ic = rc (+ the group's first channel). The padded input is a stage the schedule inlines."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    if c != cg * group or m % group:
        raise ShapeError(f"Conv: input {list(x.shape)} and weights {list(w.shape)} do not agree with group={group}")
    (sh, sw), (dh, dw) = strides, dilations
    top, left, bottom, right = pads
    oh, ow = conv_out_size(h, kh, sh, top, bottom, dh), conv_out_size(wd, kw, sw, left, right, dw)
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"Conv: kernel {kh}x{kw} does not fit the padded input {list(x.shape)}")
    # Only the rows and columns the windows reach (a right pad past them is never read).
    end_h, end_w = (oh - 1) * sh + (kh - 1) * dh + 1 - h - top, (ow - 1) * sw + (kw - 1) * dw + 1 - wd - left
    src = x
    if top or left or end_h > 0 or end_w > 0:
        src = pad(x, (0, 0, top, left), (0, 0, max(end_h, 0), max(end_w, 0)), name="conv2d_pad", tag="conv2d_pad")
    mg = m // group
    rc, rkh, rkw = te.reduce_axis(cg, "rc"), te.reduce_axis(kh, "rkh"), te.reduce_axis(kw, "rkw")

    def body(b: Expr, o: Expr, y: Expr, xx: Expr) -> Expr:
        if group == 1:
            ic = rc.var
        elif mg == 1:  # depthwise (one output channel per group): linear in o, so tiles stay boxes
            ic = o * cg + rc.var
        else:
            ic = (o // mg) * cg + rc.var
        return te.sum(src(b, ic, y * sh + rkh.var * dh, xx * sw + rkw.var * dw) * w(o, rc.var, rkh.var, rkw.var),
                      [rc, rkh, rkw])

    attrs = {"strides": (sh, sw), "dilations": (dh, dw), "group": group, "kernel": (kh, kw),
             "channels_per_group_out": mg}
    return te.compute((n, m, oh, ow), body, name="conv2d", tag="conv2d", attrs=attrs)


@register_compute("Conv", CUDA_KIND)
def conv_gpu(inputs: Sequence[Optional[te.Tensor]], attrs: Mapping[str, Any], out_types: list[TensorType]):
    x, w = require(inputs, 2, "Conv")
    bias = inputs[2] if len(inputs) > 2 else None
    if x.ndim != 4 or w.ndim != 4:
        raise ShapeError(f"Conv: only 2-D convolution (4-D NCHW input) is supported on cuda, got {list(x.shape)}")
    strides, pads = tuple(attr(attrs, "strides", "Conv", (1, 1))), tuple(attr(attrs, "pads", "Conv", (0, 0, 0, 0)))
    group = int(attr(attrs, "group", "Conv", 1))
    dilations = tuple(attr(attrs, "dilations", "Conv", (1, 1)))
    if pointwise.applies(x, w, strides, pads, group):  # an implicit GEMM over the flattened pixels
        out = pointwise.pointwise_conv(x, w, strides, pads, dilations)
        ow = out.op.attrs["width"]
        shape = (x.shape[0], w.shape[0], out.shape[2] // ow, ow)
        read = lambda b, o, y, xx: out(b, o, y * ow + xx)  # noqa: E731
    else:
        out = conv2d_gpu(x, w, strides, pads, dilations, group)
        shape, read = out.shape, lambda b, o, y, xx: out(b, o, y, xx)  # noqa: E731
    if out_types and tuple(out_types[0].shape) != shape:
        raise ShapeError(f"Conv: computed output {list(shape)} differs from the graph's {list(out_types[0].shape)}")
    if bias is not None:
        return [te.compute(shape, lambda b, o, y, xx: read(b, o, y, xx) + bias(o), name="conv2d_bias",
                           tag="conv2d_bias")]
    if shape != out.shape:
        return [te.compute(shape, read, name="conv2d_unflatten", tag="conv2d_bias")]
    return [out]


def _operands(op: ComputeOp) -> tuple[Tensor, Tensor]:
    """(data, weights) of a conv2d stage: the weights are read at (o, rc, kh, kw) exactly."""
    rc = op.reduce_axis[0]
    data = weights = None
    for e in walk_expr(op.body):
        if isinstance(e, TensorRead):
            if len(e.indices) == 4 and e.indices[0] is op.axis[1].var and e.indices[1] is rc.var:
                weights = e.tensor
            else:
                data = e.tensor
    if data is None or weights is None:
        raise ScheduleError(f"{op.name}: not a conv2d stage of the cuda compute")
    return data, weights


def _halve_to(extent: int, want: int) -> int:
    return max(1, min(want, extent))


# (columns per thread, threads along the columns) that tile an image row exactly, most preferred
# first; a stride-1 conv whose rows one of them divides is tiled that way (measured on an H100,
# resnet18's 3x3 layers at 56, 28 and 14 columns: 1.1-1.7x over the generic tiles below).
EXACT_COLUMN_TILES = ((14, 4), (16, 4), (16, 2), (14, 2), (8, 4), (7, 4), (16, 1), (14, 1), (8, 2), (7, 2))
EXACT_ROW_THREADS = (8, 7, 4)


def _exact_tiles(op: ComputeOp) -> Optional[dict[str, int]]:
    """One output channel per thread, rows and columns tiled exactly, up to 512 threads."""
    n, m, oh, ow = op.shape
    if op.attrs["group"] > 1 or op.attrs["strides"] != (1, 1) or ow < 14:
        return None
    columns = next(((t, r) for t, r in EXACT_COLUMN_TILES if ow % (t * r) == 0), None)
    rows = next((t for t in EXACT_ROW_THREADS if oh % t == 0), None)
    if columns is None or rows is None:
        return None
    x_threads, x_reg = columns
    f_threads = max(1, min(16, 512 // (x_threads * rows), m))
    return {"f_threads": f_threads, "f_reg": 1, "y_threads": rows, "y_reg": 1, "x_threads": x_threads, "x_reg": x_reg}


def default_tiles(op: ComputeOp, target: Target) -> dict[str, int]:
    """Knob defaults from the shape: exact row tiles where they exist (above), else 2 x 2 x 2
    register tiles (fewer where the output is small), about 8 x 4 x 8 threads; as many input
    channels per step as the shared budget allows."""
    n, m, oh, ow = op.shape
    cg = op.reduce_axis[0].extent
    depthwise = op.attrs["group"] > 1
    exact = _exact_tiles(op)
    if exact is not None:
        return _with_rc_tile(op, exact, cg)
    x_reg = 2 if ow >= 16 else 1
    y_reg = 2 if oh >= 16 else 1
    f_reg = 1 if depthwise else (4 if m >= 128 else 2 if m >= 32 else 1)
    x_threads = _halve_to(-(-ow // x_reg), 16 if depthwise else 8)
    y_threads = _halve_to(-(-oh // y_reg), 8 if depthwise else 4)
    f_threads = _halve_to(-(-m // f_reg), max(1, min(16, 256 // (x_threads * y_threads))))

    def blocks(fr: int) -> int:
        return (n * -(-m // (f_threads * fr)) * -(-oh // (y_threads * y_reg)) * -(-ow // (x_threads * x_reg)))

    while f_reg > 1 and blocks(f_reg) < TARGET_BLOCKS:
        f_reg //= 2
    tiles = {"f_threads": f_threads, "f_reg": f_reg, "y_threads": y_threads, "y_reg": y_reg,
             "x_threads": x_threads, "x_reg": x_reg}
    return _with_rc_tile(op, tiles, cg)


def _with_rc_tile(op: ComputeOp, tiles: dict[str, int], cg: int) -> dict[str, int]:
    rc_tile = min(cg, 16)
    while rc_tile > 1 and conv_shared_bytes(op, tiles, rc_tile) > SHARED_BUDGET:
        rc_tile = -(-rc_tile // 2)
    return {**tiles, "rc_tile": rc_tile}


def conv_shared_bytes(op: ComputeOp, t: Mapping[str, int], rc_tile: int) -> int:
    (sh, sw), (dh, dw), (kh, kw) = op.attrs["strides"], op.attrs["dilations"], op.attrs["kernel"]
    f = t["f_threads"] * t["f_reg"]
    rows = (t["y_threads"] * t["y_reg"] - 1) * sh + (kh - 1) * dh + 1
    cols = (t["x_threads"] * t["x_reg"] - 1) * sw + (kw - 1) * dw + 1
    channels = f * rc_tile if op.attrs["group"] > 1 else rc_tile
    return 4 * (channels * rows * cols + f * rc_tile * kh * kw)


def _conv_output(sch: Schedule, conv: ComputeOp, outs: Sequence[Tensor]) -> Stage:
    """The kernel output that carries the conv's result (the conv itself, or the fused epilogue's
    last stage, which must read the conv at its own output point, flattened for a pointwise conv)."""
    for stage in output_stages(sch, outs):
        shaped = stage.op.shape == conv.shape or (conv.attrs.get("flat") and len(stage.op.shape) == 4
                                                  and stage.op.shape[:2] == conv.shape[:2]
                                                  and stage.op.shape[2] * stage.op.shape[3] == conv.shape[2])
        if stage.op is conv or (shaped and conv in [s.op for s in _reads(sch, stage)]):
            return stage
    raise ScheduleError(f"{conv.name}: no kernel output of its shape reads it (cuda conv epilogues must be elementwise)")


def _reads(sch: Schedule, stage: Stage) -> list[Stage]:
    from .launch import reduction_producers

    return reduction_producers(sch, stage.op)


def schedule_conv2d(sch: Schedule, outs: Sequence[Tensor], target: Target, **knobs: int) -> None:
    """knobs: f_threads, f_reg, y_threads, y_reg, x_threads, x_reg, rc_tile (defaults: default_tiles)."""
    reject_extern(sch, target)
    conv = find_op(outs, "conv2d")
    if conv is None or len(conv.reduce_axis) != (1 if conv.attrs.get("flat") else 3):
        raise ScheduleError("schedule_conv2d (cuda): the kernel has no conv2d stage of the cuda compute")
    for stage in output_stages(sch, outs):  # the bias and epilogue chain: read in the output stage
        inline_intermediates(sch, stage, outs, keep_tags=("conv2d_pixels", "conv2d_weights"))
    out = _conv_output(sch, conv, outs)
    if conv.attrs.get("flat"):
        if out.op is conv:
            raise ScheduleError(f"{conv.name}: a pointwise conv is read through its unflattening stage")
        pointwise.schedule_pointwise(sch, conv, out, target, **knobs)
        return
    if conv.attrs["group"] > 1 and conv.attrs["channels_per_group_out"] > 1:
        # Grouped with several outputs per group: a tile's input channels are not a box; no shared copy.
        conv_stage = sch[Tensor(conv)]
        if out.op is not conv:
            sch.cache_write(Tensor(conv), "local")
            conv_stage.compute_inline()
        one_thread_per_output(sch, out, target)
        return
    t = {**default_tiles(conv, target), **knobs}
    data, weights = _operands(conv)
    for padded in inputs_tagged(conv, "conv2d_pad"):
        sch[Tensor(padded)].compute_inline()
    conv_t = Tensor(conv)
    data_shared = sch.cache_read(data, "shared", [conv_t])
    weights_shared = sch.cache_read(weights, "shared", [conv_t])
    local = sch.cache_write(conv_t, "local")
    if out.op is not conv:
        sch[conv_t].compute_inline()

    n, f, y, x = out.op.axis
    (bf, by, bx), (tf, ty, tx) = thread_tiles(out, [(axis, t[f"{name}_threads"], t[f"{name}_reg"])
                                                    for axis, name in ((f, "f"), (y, "y"), (x, "x"))], (n,))
    out.bind(out.fuse(n, bf), "blockIdx.z")
    out.bind(by, "blockIdx.y")
    out.bind(bx, "blockIdx.x")

    ls = sch[local]
    rc, rkh, rkw = ls.reduce_axis
    rco, rci = ls.split(rc, t["rc_tile"])
    ln, lf, ly, lx = ls.op.axis
    ls.reorder(rco, rci, rkh, rkw, ln, lf, ly, lx)
    ls.compute_at(out, tx)
    for iv in (lf, ly, lx):
        ls.unroll(iv)
    threads = (("threadIdx.z", tf.extent), ("threadIdx.y", ty.extent), ("threadIdx.x", tx.extent))
    for copy in (data_shared, weights_shared):
        sch[copy].compute_at(ls, rco)
        cooperative_fetch(sch[copy], threads)
