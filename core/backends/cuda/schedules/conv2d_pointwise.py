"""GPU 1x1 convolutions (stride 1, no pads, one group) as the GEMM they are: output channels x
flattened pixels, tiled like dense.py. The image rows of a 1x1 layer are short (7, 14, 28 pixels):
tiling rows x columns would leave most threads of a block idle or guarded, while the flattened pixel
axis of a whole image fills warps with consecutive addresses."""
from __future__ import annotations

from typing import Sequence

from ....target import Target
from ....te import tensor as te
from ....te.schedule import Schedule, Stage
from ....te.tensor import ComputeOp, Tensor
from ....tir.expr import Expr

TARGET_BLOCKS = 132  # an H100's SMs: at least one block each before register tiles grow


def applies(x: te.Tensor, w: te.Tensor, strides: Sequence[int], pads: Sequence[int], group: int) -> bool:
    return w.shape[2:] == (1, 1) and tuple(strides) == (1, 1) and not any(pads) and group == 1


def pointwise_conv(x: te.Tensor, w: te.Tensor) -> te.Tensor:
    """conv[n, m, p] = sum over c of image[n, c, p] * w[m, c, 0, 0] over the flattened pixels p; the
    flattened view of x is a stage the schedule inlines into its shared copy."""
    n, c, h, wd = x.shape
    m = w.shape[0]
    image = te.compute((n, c, h * wd), lambda b, ch, p: x(b, ch, p // wd, p % wd), name="conv2d_pixels",
                       tag="conv2d_pixels")
    rc = te.reduce_axis(c, "rc")

    def body(b: Expr, o: Expr, p: Expr) -> Expr:
        return te.sum(image(b, rc.var, p) * w(o, rc.var, 0, 0), [rc])

    return te.compute((n, m, h * wd), body, name="conv2d", tag="conv2d",
                      attrs={"flat": True, "width": wd, "group": 1, "kernel": (1, 1)})


def default_tiles(op: ComputeOp) -> dict[str, int]:
    n, m, pixels = op.shape
    k = op.reduce_axis[0].extent
    p_threads = min(32, pixels)
    f_threads = max(1, min(8, m))
    f_reg, p_reg = 4, 2

    def blocks(fr: int, pr: int) -> int:
        return n * -(-m // (f_threads * fr)) * -(-pixels // (p_threads * pr))

    while (f_reg > 1 or p_reg > 1) and blocks(f_reg, p_reg) < TARGET_BLOCKS:
        if f_reg >= 2 * p_reg or p_reg == 1:
            f_reg //= 2
        else:
            p_reg //= 2
    return {"f_threads": f_threads, "f_reg": f_reg, "p_threads": p_threads, "p_reg": p_reg, "rc_tile": min(k, 16)}


def schedule_pointwise(sch: Schedule, conv: ComputeOp, out: Stage, target: Target, **knobs: int) -> None:
    """`out` (n, m, oh, ow): the kernel output reading conv at (n, m, y * ow + x)."""
    from .dense import tile_gemm  # dense imports conv2d, which imports this module

    t = {**default_tiles(conv), **knobs}
    conv_t = Tensor(conv)
    image = next(s for s in conv.input_tensors if isinstance(s.op, ComputeOp) and s.op.tag == "conv2d_pixels")
    weights = next(s for s in conv.input_tensors if s is not image)
    image_shared = sch.cache_read(image, "shared", [conv_t])
    weights_shared = sch.cache_read(weights, "shared", [conv_t])
    sch[image].compute_inline()
    local = sch.cache_write(conv_t, "local")
    if out.op is not conv:
        sch[conv_t].compute_inline()

    n, f, y, x = out.op.axis
    p = out.fuse(y, x)  # reads conv at (y // ow) * ow + y % ow: p itself after simplification
    bf, bp = tile_gemm(sch, out, local, (f, t["f_threads"], t["f_reg"]), (p, t["p_threads"], t["p_reg"]), t["rc_tile"],
                       (image_shared, weights_shared), outer=(n,))
    out.bind(out.fuse(n, bf), "blockIdx.y")
    out.bind(bp, "blockIdx.x")
