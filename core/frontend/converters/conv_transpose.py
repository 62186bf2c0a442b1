"""ConvTranspose (1-D to 3-D) and Col2Im as ONE ordinary Conv over the input, gather-style: with stride s, output
row P = q*s + r only receives kernel taps t = r + s*j, so every output phase r is a stride-1 conv
of the input with the sub-kernel of its taps. The phases become extra output channels of a single
Conv (the tuned conv kernel; ConvND in 3-D; no zero-inserted input, no scatter), interleaved back by
a Reshape/Transpose and cropped to the output window.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .registry import ConvertContext, converter
from .windows import lift_1d


@dataclass(frozen=True)
class PhaseAxis:
    """One spatial axis of the phase decomposition."""

    stride: int
    taps: int  # J: sub-kernel length of every phase (the dilated kernel's length / stride, rounded up)
    pad_begin: int  # zero padding of the input for the phase convs
    pad_end: int
    rows: int  # conv output rows per phase
    crop: int  # first interleaved row that is output row 0
    size: int  # output rows

    def tap_of(self, phase: int, u: int, kernel: int, dilation: int) -> int | None:
        """Kernel index feeding phase conv tap u of `phase`, or None (a zero)."""
        t = phase + self.stride * (self.taps - 1 - u)  # position in the dilated kernel
        if t % dilation or t // dilation >= kernel:
            return None
        return t // dilation


def phase_axis(size_in: int, kernel: int, stride: int, dilation: int, pad_begin: int, size_out: int) -> PhaseAxis:
    span = (kernel - 1) * dilation + 1
    taps = -(-span // stride)
    # Output row o is interleaved row P = o + pad_begin = q*s + r; phase conv row q - q0 reads input rows
    # q - taps + 1 .. q, so the input is padded by taps - 1 - q0 in front.
    q0 = min(pad_begin // stride, taps - 1)
    q_last = (pad_begin + size_out - 1) // stride
    front = taps - 1 - q0
    back = max(0, q_last - q0 + taps - size_in - front)
    rows = size_in + front + back - taps + 1
    return PhaseAxis(stride, taps, front, back, rows, pad_begin - q0 * stride, size_out)


def _geometry(ctx: ConvertContext, sizes, kernel, strides, dilations, output_padding):
    """(pads begin, output sizes) per axis, from pads / auto_pad / output_shape as ONNX defines them."""
    count = len(sizes)
    natural = [strides[a] * (sizes[a] - 1) + output_padding[a] + (kernel[a] - 1) * dilations[a] + 1
               for a in range(count)]
    auto_pad = ctx.attr("auto_pad", "NOTSET") or "NOTSET"
    output_shape = ctx.attr("output_shape")
    if output_shape is not None:
        output_shape = [int(v) for v in output_shape][-count:]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = output_shape or [sizes[a] * strides[a] for a in range(count)]
        total = [natural[a] - out[a] for a in range(count)]
        small = [t // 2 for t in total]
        begins = small if auto_pad == "SAME_UPPER" else [t - s for t, s in zip(total, small)]
        return begins, out
    if auto_pad not in ("NOTSET", "VALID"):
        ctx.fail(f"unknown auto_pad {auto_pad!r}")
    pads = [int(p) for p in ctx.attr("pads", [0] * (2 * count))] if auto_pad == "NOTSET" else [0] * (2 * count)
    if len(pads) != 2 * count:
        ctx.fail(f"pads {pads} need {2 * count} values")
    if output_shape is not None:
        return pads[:count], output_shape  # the rows past the natural output are zero padding (output_padding)
    return pads[:count], [natural[a] - pads[a] - pads[count + a] for a in range(count)]


def _phase_weights(ctx: ConvertContext, w: str, w_shape, group: int, axes: list[PhaseAxis], dilations) -> str:
    """The Conv weights [group * Mg * prod(strides), Cg, *taps], gathered from W [C, Mg, *kernel] (+ a zero)."""
    c, mg, kernel = w_shape[0], w_shape[1], w_shape[2:]
    cg = c // group
    spatial = len(axes)
    zero = int(np.prod(w_shape))
    # Per axis: kernel index of (phase, tap), -1 where the phase has no tap there.
    per_axis = [np.array([[-1 if (k := ax.tap_of(r, u, kernel[a], dilations[a])) is None else k
                           for u in range(ax.taps)] for r in range(ax.stride)]) for a, ax in enumerate(axes)]
    # Broadcast to (g, m, r_1..r_k, c, u_1..u_k).
    rank = 3 + 2 * spatial

    def along(values: np.ndarray, dims: tuple[int, ...]) -> np.ndarray:
        shape = [1] * rank
        for d, n in zip(dims, values.shape):
            shape[d] = n
        return values.reshape(shape)

    g = along(np.arange(group), (0,))
    m = along(np.arange(mg), (1,))
    ch = along(np.arange(cg), (2 + spatial,))
    flat = (g * cg + ch) * mg + m
    valid = np.ones([1] * rank, bool)
    for a in range(spatial):
        k = along(per_axis[a], (2 + a, 3 + spatial + a))
        flat = flat * kernel[a] + np.maximum(k, 0)
        valid = valid & (k >= 0)
    table = np.where(valid, flat, zero)
    table = np.broadcast_to(table, (group, mg) + tuple(ax.stride for ax in axes) + (cg,) + tuple(ax.taps for ax in axes))
    table = table.reshape((-1, cg) + tuple(ax.taps for ax in axes))
    flat_w = ctx.reshape(w, [zero])
    padded = ctx.emit1("Concat", [flat_w, ctx.const(np.zeros(1, ctx.builder.type_of(w).dtype))], axis=0)
    return ctx.emit1("Gather", [padded, ctx.const(np.ascontiguousarray(table))], axis=0)


@converter("ConvTranspose", since_version=1)
def conv_transpose(ctx: ConvertContext) -> str:
    x_type, w_type = ctx.type_of(0), ctx.type_of(1)
    spatial = x_type.rank - 2
    if spatial not in (1, 2, 3):
        ctx.unsupported(f"{spatial}-D ConvTranspose (1-D to 3-D only)")
    if w_type.rank != x_type.rank:
        ctx.fail(f"weights {w_type} do not match input {x_type}")
    group = int(ctx.attr("group", 1))
    c, mg = w_type.shape[:2]
    if x_type.shape[1] != c or c % group:
        ctx.fail(f"input {x_type} and weights {w_type} do not agree with group={group}")

    def ints(name: str, default: int) -> list[int]:
        value = [int(v) for v in ctx.attr(name, [default] * spatial)]
        if len(value) != spatial:
            ctx.fail(f"attribute {name}={value} needs {spatial} values")
        return value

    kernel = list(w_type.shape[2:])
    strides, dilations, output_padding = ints("strides", 1), ints("dilations", 1), ints("output_padding", 0)
    if any(v < 1 for v in strides + dilations) or any(v < 0 for v in output_padding):
        ctx.fail(f"strides {strides}, dilations {dilations} and output_padding {output_padding} are out of range")
    begins, out = _geometry(ctx, list(x_type.shape[2:]), kernel, strides, dilations, output_padding)
    if any(o <= 0 for o in out):
        ctx.fail(f"output size {out} is empty")
    x, w = ctx.input(0), ctx.input(1)
    sizes = list(x_type.shape[2:])
    if spatial == 1:  # a unit-height 2-D problem
        x, w = lift_1d(ctx, x), lift_1d(ctx, w)
        sizes, kernel, strides, dilations, begins, out = ([1] + sizes, [1] + kernel, [1] + strides,
                                                          [1] + dilations, [0] + begins, [1] + out)
    bias = ctx.input(2) if ctx.has_input(2) else None
    y = transposed_conv(ctx, x, w, bias, group, sizes, kernel, strides, dilations, begins, out)
    return ctx.reshape(y, [x_type.shape[0], group * mg] + out[1:]) if spatial == 1 else y


def transposed_conv(ctx: ConvertContext, x: str, w: str, bias: str | None, group: int, sizes: list[int],
                    kernel: list[int], strides: list[int], dilations: list[int], begins: list[int],
                    out: list[int]) -> str:
    """The transposed conv of x [N, C, *sizes] by W [C, Mg, *kernel] onto `out`, `begins` cropped in front:
    one Conv over the stride phases (ConvND beyond 2-D), interleaved and cropped."""
    n, c = ctx.builder.type_of(x).shape[:2]
    mg = ctx.builder.type_of(w).shape[1]
    spatial = len(sizes)
    axes = [phase_axis(sizes[a], kernel[a], strides[a], dilations[a], begins[a], out[a]) for a in range(spatial)]
    weights = _phase_weights(ctx, w, (c, mg) + tuple(kernel), group, axes, dilations)
    inputs = [x, weights]
    phases = int(np.prod(strides))
    if bias is not None:
        inputs.append(ctx.emit1("Gather", [bias, ctx.const(np.repeat(np.arange(group * mg), phases))], axis=0))
    pads = tuple(a.pad_begin for a in axes) + tuple(a.pad_end for a in axes)
    if spatial == 2:
        y = ctx.emit1("Conv", inputs, strides=(1, 1), pads=pads, dilations=(1, 1), group=group)
    else:
        y = ctx.emit1("ConvND", inputs, pads=pads, group=group)
    m = group * mg
    rows = [a.rows for a in axes]
    if phases > 1:
        y = ctx.reshape(y, [n, m] + list(strides) + rows)
        perm = (0, 1) + tuple(d for a in range(spatial) for d in (2 + spatial + a, 2 + a))
        y = ctx.emit1("Transpose", [y], perm=perm)
        y = ctx.reshape(y, [n, m] + [r * s for r, s in zip(rows, strides)])
    return _crop(ctx, y, [a.crop for a in axes], [a.size for a in axes])


def _crop(ctx: ConvertContext, y: str, starts: list[int], sizes: list[int]) -> str:
    """The output window of the interleaved phases (phase_axis makes them cover it)."""
    shape = ctx.builder.type_of(y).shape
    if all(s == 0 for s in starts) and tuple(sizes) == shape[2:]:
        return y
    return ctx.emit1("Slice", [y], starts=(0, 0) + tuple(starts), steps=(1,) * len(shape),
                     sizes=shape[:2] + tuple(sizes))


@converter("Col2Im", since_version=18)
def col2im(ctx: ConvertContext) -> str:
    """Col2Im is the transposed conv whose weights put block element k of channel c back at offset k:
    one-hot weights [C * B, 1, *block] with one group per channel (folded at import)."""
    x = ctx.type_of(0)  # [N, C * prod(block), L]
    image = [int(v) for v in ctx.constant(1, "image_shape").reshape(-1)]
    block = [int(v) for v in ctx.constant(2, "block_shape").reshape(-1)]
    spatial = len(image)
    if spatial not in (2, 3) or len(block) != spatial:
        ctx.unsupported(f"Col2Im of a {spatial}-D image (2-D and 3-D only)")
    blocks = int(np.prod(block))
    if x.rank != 3 or x.shape[1] % blocks:
        ctx.fail(f"input {x} does not hold blocks of {block}")
    strides = [int(v) for v in ctx.attr("strides", [1] * spatial)]
    dilations = [int(v) for v in ctx.attr("dilations", [1] * spatial)]
    pads = [int(v) for v in ctx.attr("pads", [0] * (2 * spatial))]
    counts = [(image[a] + pads[a] + pads[a + spatial] - (block[a] - 1) * dilations[a] - 1) // strides[a] + 1
              for a in range(spatial)]
    if int(np.prod(counts)) != x.shape[2]:
        ctx.fail(f"{x.shape[2]} blocks do not tile image {image} (expected {counts})")
    channels = x.shape[1] // blocks
    one_hot = np.tile(np.eye(blocks, dtype=x.dtype).reshape(blocks, 1, *block), (channels, 1) + (1,) * spatial)
    cols = ctx.reshape(ctx.input(0), [x.shape[0], x.shape[1]] + counts)
    return transposed_conv(ctx, cols, ctx.const(one_hot), None, channels, counts, block, strides, dilations,
                           pads[:spatial], image)
