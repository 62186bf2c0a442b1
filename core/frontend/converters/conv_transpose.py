"""ConvTranspose (1-D and 2-D) as ONE ordinary Conv over the input, gather-style: with stride s, output
row P = q*s + r only receives kernel taps t = r + s*j, so every output phase r is a stride-1 conv
of the input with the sub-kernel of its taps. The phases become extra output channels of a single
Conv (the tuned conv kernel, no zero-inserted input, no scatter), interleaved back by a
Reshape/Transpose and cropped to the output window.
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
    """The Conv weights [group * Mg * sh * sw, Cg, Jh, Jw], gathered from W [C, Mg, kh, kw] (+ a zero)."""
    c, mg, kh, kw = w_shape
    cg = c // group
    (ah, aw), (dh, dw) = axes, dilations
    zero = c * mg * kh * kw
    table = np.full((group, mg, ah.stride, aw.stride, cg, ah.taps, aw.taps), zero, dtype=np.int64)
    for rh in range(ah.stride):
        for uh in range(ah.taps):
            ky = ah.tap_of(rh, uh, kh, dh)
            if ky is None:
                continue
            for rw in range(aw.stride):
                for uw in range(aw.taps):
                    kx = aw.tap_of(rw, uw, kw, dw)
                    if kx is None:
                        continue
                    g, m, ch = np.meshgrid(np.arange(group), np.arange(mg), np.arange(cg), indexing="ij")
                    table[g, m, rh, rw, ch, uh, uw] = (((g * cg + ch) * mg + m) * kh + ky) * kw + kx
    flat = ctx.reshape(w, [zero])
    padded = ctx.emit1("Concat", [flat, ctx.const(np.zeros(1, ctx.builder.type_of(w).dtype))], axis=0)
    table = table.reshape(group * mg * ah.stride * aw.stride, cg, ah.taps, aw.taps)
    return ctx.emit1("Gather", [padded, ctx.const(table)], axis=0)


@converter("ConvTranspose", since_version=1)
def conv_transpose(ctx: ConvertContext) -> str:
    x_type, w_type = ctx.type_of(0), ctx.type_of(1)
    spatial = x_type.rank - 2
    if spatial not in (1, 2):
        ctx.unsupported(f"{spatial}-D ConvTranspose (1-D and 2-D only)")
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
    y = transposed_conv_2d(ctx, x, w, bias, group, sizes, kernel, strides, dilations, begins, out)
    return ctx.reshape(y, [x_type.shape[0], group * mg] + out[1:]) if spatial == 1 else y


def transposed_conv_2d(ctx: ConvertContext, x: str, w: str, bias: str | None, group: int, sizes: list[int],
                       kernel: list[int], strides: list[int], dilations: list[int], begins: list[int],
                       out: list[int]) -> str:
    """The 2-D transposed conv of NCHW x by W [C, Mg, kh, kw] onto `out` rows x columns, `begins` cropped
    in front: one Conv over the stride phases, interleaved and cropped."""
    n, c = ctx.builder.type_of(x).shape[:2]
    mg = ctx.builder.type_of(w).shape[1]
    axes = [phase_axis(sizes[a], kernel[a], strides[a], dilations[a], begins[a], out[a]) for a in range(2)]
    weights = _phase_weights(ctx, w, (c, mg) + tuple(kernel), group, axes, dilations)
    inputs = [x, weights]
    phases = strides[0] * strides[1]
    if bias is not None:
        inputs.append(ctx.emit1("Gather", [bias, ctx.const(np.repeat(np.arange(group * mg), phases))], axis=0))
    pads = (axes[0].pad_begin, axes[1].pad_begin, axes[0].pad_end, axes[1].pad_end)
    y = ctx.emit1("Conv", inputs, strides=(1, 1), pads=pads, dilations=(1, 1), group=group)
    m = group * mg
    rows = [a.rows for a in axes]
    if phases > 1:
        y = ctx.reshape(y, [n, m, strides[0], strides[1]] + rows)
        y = ctx.emit1("Transpose", [y], perm=(0, 1, 4, 2, 5, 3))
        y = ctx.reshape(y, [n, m, rows[0] * strides[0], rows[1] * strides[1]])
    return _crop(ctx, y, [a.crop for a in axes], [a.size for a in axes])


def _crop(ctx: ConvertContext, y: str, starts: list[int], sizes: list[int]) -> str:
    """The output window of the interleaved phases (phase_axis makes them cover it)."""
    shape = ctx.builder.type_of(y).shape
    if all(s == 0 for s in starts) and tuple(sizes) == shape[2:]:
        return y
    return ctx.emit1("Slice", [y], starts=(0, 0) + tuple(starts), steps=(1, 1, 1, 1), sizes=shape[:2] + tuple(sizes))


@converter("Col2Im", since_version=18)
def col2im(ctx: ConvertContext) -> str:
    """Col2Im is the transposed conv whose weights put block element k of channel c back at offset k:
    one-hot weights [C * B, 1, *block] with one group per channel (folded at import)."""
    x = ctx.type_of(0)  # [N, C * prod(block), L]
    image = [int(v) for v in ctx.constant(1, "image_shape").reshape(-1)]
    block = [int(v) for v in ctx.constant(2, "block_shape").reshape(-1)]
    if len(image) != 2 or len(block) != 2:
        ctx.unsupported(f"Col2Im of a {len(image)}-D image (2-D only)")
    blocks = block[0] * block[1]
    if x.rank != 3 or x.shape[1] % blocks:
        ctx.fail(f"input {x} does not hold blocks of {block}")
    strides = [int(v) for v in ctx.attr("strides", [1, 1])]
    dilations = [int(v) for v in ctx.attr("dilations", [1, 1])]
    pads = [int(v) for v in ctx.attr("pads", [0, 0, 0, 0])]
    counts = [(image[a] + pads[a] + pads[a + 2] - (block[a] - 1) * dilations[a] - 1) // strides[a] + 1
              for a in range(2)]
    if counts[0] * counts[1] != x.shape[2]:
        ctx.fail(f"{x.shape[2]} blocks do not tile image {image} (expected {counts[0]} x {counts[1]})")
    channels = x.shape[1] // blocks
    one_hot = np.tile(np.eye(blocks, dtype=x.dtype).reshape(blocks, 1, *block), (channels, 1, 1, 1))
    cols = ctx.reshape(ctx.input(0), [x.shape[0], x.shape[1]] + counts)
    return transposed_conv_2d(ctx, cols, ctx.const(one_hot), None, channels, counts, block, strides, dilations,
                              pads[:2], image)
