"""GPU group-1 convolutions as an implicit GEMM on the SIMT tiled path: output channels x flattened output pixels,
reduced over K = C*KH*KW, tiled like dense.py's float32 GEMM. The gathered image (im2col, never stored: each shared
copy reads the padded input at the tap it needs) and the flattened weights are stages inlined into the shared copies.
Flattened pixels fill warps where an image row (7, 14, 28 pixels) would leave most threads of a block idle; a direct
3x3 conv reached ~2 TFLOP/s on an H200 where this tiling reaches ~26 for a GEMM."""
from __future__ import annotations

from typing import Sequence

from ....target import Target
from ....te import tensor as te
from ....te.schedule import Schedule, Stage
from ....te.tensor import ComputeOp, Tensor
from ....tir.expr import Expr
from ....kernels.conv2d import conv_out_size
from ....kernels.transform import pad

def applies(x: te.Tensor, w: te.Tensor, strides: Sequence[int], pads: Sequence[int], group: int) -> bool:
    return group == 1


def pointwise_conv(x: te.Tensor, w: te.Tensor, strides: Sequence[int] = (1, 1), pads: Sequence[int] = (0, 0, 0, 0),
                   dilations: Sequence[int] = (1, 1)) -> te.Tensor:
    """conv[n, m, p] = sum over k of image[n, k, p] * weights[m, k] over the flattened output pixels p and
    k = (c, kh, kw); image (the padded input at tap k of pixel p) and weights (w flattened) are stages the schedule
    inlines into its shared copies."""
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    (sh, sw), (dh, dw), (top, left, bottom, right) = strides, dilations, pads
    oh, ow = conv_out_size(h, kh, sh, top, bottom, dh), conv_out_size(wd, kw, sw, left, right, dw)
    taps = kh * kw
    # Only the rows and columns the windows reach (a right pad past them is never read).
    end_h, end_w = (oh - 1) * sh + (kh - 1) * dh + 1 - h - top, (ow - 1) * sw + (kw - 1) * dw + 1 - wd - left
    src = x
    if top or left or end_h > 0 or end_w > 0:
        src = pad(x, (0, 0, top, left), (0, 0, max(end_h, 0), max(end_w, 0)), name="conv2d_pad", tag="conv2d_pad")

    def gathered(b: Expr, k: Expr, p: Expr) -> Expr:
        if taps == 1:
            return src(b, k, (p // ow) * sh, (p % ow) * sw)
        return src(b, k // taps, (p // ow) * sh + ((k // kw) % kh) * dh, (p % ow) * sw + (k % kw) * dw)

    image = te.compute((n, c * taps, oh * ow), gathered, name="conv2d_pixels", tag="conv2d_pixels")
    flat = (lambda o, k: w(o, k, 0, 0)) if taps == 1 else (lambda o, k: w(o, k // taps, (k // kw) % kh, k % kw))
    weights = te.compute((m, c * taps), flat, name="conv2d_weights", tag="conv2d_weights")
    rc = te.reduce_axis(c * taps, "rc")

    def body(b: Expr, o: Expr, p: Expr) -> Expr:
        return te.sum(image(b, rc.var, p) * weights(o, rc.var), [rc])

    return te.compute((n, m, oh * ow), body, name="conv2d", tag="conv2d",
                      attrs={"flat": True, "width": ow, "group": 1, "kernel": (kh, kw)})


def is_implicit_gemm(func) -> bool:
    """Whether a lowered cuda kernel computes a conv as this implicit GEMM (it copies the gathered image to shared)."""
    from ....tir.functor import walk_stmt
    from ....tir.stmt import Allocate

    return any(isinstance(s, Allocate) and s.buffer.name == "conv2d_pixels.shared" for s in walk_stmt(func.body))


def default_tiles(op: ComputeOp) -> dict[str, int]:
    """The float32 GEMM's tiles (dense.default_tiles: 8 x 8 threads of up to 4 x 4 outputs, k steps of 16), the conv
    being the batched GEMM [n] x (channels x pixels) it computes."""
    from .dense import default_tiles as gemm_tiles  # dense imports conv2d, which imports this module

    t = gemm_tiles(op)
    return {"f_threads": t["m_threads"], "f_reg": t["m_reg"], "p_threads": t["n_threads"], "p_reg": t["n_reg"],
            "rc_tile": t["k_tile"]}


def schedule_pointwise(sch: Schedule, conv: ComputeOp, out: Stage, target: Target, **knobs: int) -> None:
    """`out` (n, m, oh, ow): the kernel output reading conv at (n, m, y * ow + x)."""
    from .dense import tile_gemm  # dense imports conv2d, which imports this module

    t = {**default_tiles(conv), **knobs}
    conv_t = Tensor(conv)
    image = next(s for s in conv.input_tensors if isinstance(s.op, ComputeOp) and s.op.tag == "conv2d_pixels")
    weights = next(s for s in conv.input_tensors if isinstance(s.op, ComputeOp) and s.op.tag == "conv2d_weights")
    image_shared = sch.cache_read(image, "shared", [conv_t])
    weights_shared = sch.cache_read(weights, "shared", [conv_t])
    sch[image].compute_inline()
    sch[weights].compute_inline()  # w flattened to [m, k]: read through, as the copy fetches it
    local = sch.cache_write(conv_t, "local")
    if out.op is not conv:
        sch[conv_t].compute_inline()

    n, f, y, x = out.op.axis
    p = out.fuse(y, x)  # reads conv at (y // ow) * ow + y % ow: p itself after simplification
    bf, bp = tile_gemm(sch, out, local, (f, t["f_threads"], t["f_reg"]), (p, t["p_threads"], t["p_reg"]), t["rc_tile"],
                       (image_shared, weights_shared), outer=(n,), bank_padded=weights_shared)  # as the GEMM's A
    out.bind(out.fuse(n, bf), "blockIdx.y")
    out.bind(bp, "blockIdx.x")
