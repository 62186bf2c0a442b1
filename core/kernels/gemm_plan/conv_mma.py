"""Implicit-GEMM convolution for the tensor-core GEMM (gemm_mma.py): a 2-D convolution's geometry and the index
functions that read the GEMM's A (M = N*OH*OW rows, K = C*KH*KW columns) straight from the input, padding zeros
included, and place C[m, oc] in the output, so no im2col matrix is ever materialized.

Two layouts. "nhwc": K runs (kh, kw, c) with c innermost, so 8 consecutive K are one 16-byte chunk of channels at
one kernel position (copied by cp.async; needs C % 8 == 0), weights are OHWI ([OC, K], K contiguous) and the
output is NHWC. "nchw" (the graph's own layout): K runs (c, kh, kw) as the OIHW weights do, A is gathered element
by element (8 loads a chunk, staged in registers while the tensor cores work) and the output is NCHW.

Written over +, *, //, %, `below` so that the NVPTX emitter evaluates them on LLVM values and the CPU emulation
on numpy arrays (negative coordinates of the padding wrap around in the emitter's unsigned arithmetic, which
`below` then rejects, as numpy's signed comparison does).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LAYOUTS = ("nchw", "nhwc")


def below(x, bound):
    """1 where 0 <= x < bound, else 0 (the emitter's Index compares unsigned: a wrapped negative fails too)."""
    if hasattr(x, "below"):
        return x.below(bound)
    x = np.asarray(x)
    return ((x >= 0) & (x < bound)).astype(np.int64)


@dataclass(frozen=True)
class ConvShape:
    """A group-1 2-D convolution: input [batch, channels, height, width] (NCHW) or its NHWC transpose, weights
    [out_channels, channels, kernel_h, kernel_w] (OIHW) or OHWI, padding at top/left (the bottom/right pads only
    decide out_h/out_w)."""

    batch: int
    channels: int
    height: int
    width: int
    out_channels: int
    kernel_h: int
    kernel_w: int
    out_h: int
    out_w: int
    stride_h: int = 1
    stride_w: int = 1
    pad_h: int = 0
    pad_w: int = 0
    dilation_h: int = 1
    dilation_w: int = 1
    layout: str = "nchw"

    def __post_init__(self):
        if self.layout not in LAYOUTS:
            raise ValueError(f"implicit-GEMM conv: layout {self.layout!r} is not one of {LAYOUTS}")
        if self.layout == "nhwc" and self.channels % 8:
            raise ValueError(f"implicit-GEMM conv: NHWC needs channels in 16-byte chunks (C % 8), got {self.channels}")

    @property
    def gemm_mnk(self) -> tuple[int, int, int]:
        return (self.batch * self.out_h * self.out_w, self.out_channels,
                self.channels * self.kernel_h * self.kernel_w)

    @property
    def input_shape(self) -> tuple[int, ...]:
        n, c, h, w = self.batch, self.channels, self.height, self.width
        return (n, c, h, w) if self.layout == "nchw" else (n, h, w, c)

    @property
    def weight_shape(self) -> tuple[int, ...]:
        o, c, kh, kw = self.out_channels, self.channels, self.kernel_h, self.kernel_w
        return (o, c, kh, kw) if self.layout == "nchw" else (o, kh, kw, c)

    @property
    def output_shape(self) -> tuple[int, ...]:
        n, o, oh, ow = self.batch, self.out_channels, self.out_h, self.out_w
        return (n, o, oh, ow) if self.layout == "nchw" else (n, oh, ow, o)

    @property
    def gathered(self) -> bool:
        """A is gathered element by element (NCHW) rather than copied in 16-byte chunks."""
        return self.layout == "nchw"


def _pixel(conv: ConvShape, m):
    """(image, input row origin, input column origin, output pixel within the image) of GEMM row m."""
    pixels = conv.out_h * conv.out_w
    image, pixel = m // pixels, m % pixels
    return image, (pixel // conv.out_w) * conv.stride_h - conv.pad_h, (pixel % conv.out_w) * conv.stride_w - conv.pad_w, pixel


def a_chunk_source(conv: ConvShape, m, k):
    """(offset in the NHWC input, inside: 1/0) of the 8 channels of A[m, k:k + 8] (k a multiple of 8)."""
    m_count, _, k_count = conv.gemm_mnk
    image, row0, col0, _ = _pixel(conv, m)
    position, channel = k // conv.channels, k % conv.channels
    ih = row0 + (position // conv.kernel_w) * conv.dilation_h
    iw = col0 + (position % conv.kernel_w) * conv.dilation_w
    inside = below(m, m_count) * below(k, k_count) * below(ih, conv.height) * below(iw, conv.width)
    return ((image * conv.height + ih) * conv.width + iw) * conv.channels + channel, inside


def a_element_source(conv: ConvShape, m, k):
    """(offset in the NCHW input, inside: 1/0) of A[m, k], k = (c, kh, kw)."""
    m_count, _, k_count = conv.gemm_mnk
    image, row0, col0, _ = _pixel(conv, m)
    taps = conv.kernel_h * conv.kernel_w
    channel, tap = k // taps, k % taps
    ih = row0 + (tap // conv.kernel_w) * conv.dilation_h
    iw = col0 + (tap % conv.kernel_w) * conv.dilation_w
    inside = below(m, m_count) * below(k, k_count) * below(ih, conv.height) * below(iw, conv.width)
    return ((image * conv.channels + channel) * conv.height + ih) * conv.width + iw, inside


def output_index(conv: ConvShape, m, n):
    """The offset of C[m, n] (output channel n of GEMM row m's pixel) in the output."""
    if conv.layout == "nhwc":
        return m * conv.out_channels + n
    pixels = conv.out_h * conv.out_w
    return (m // pixels * conv.out_channels + n) * pixels + m % pixels


def column_stride(conv: ConvShape) -> int:
    """How far apart in the output C[m, n] and C[m, n + 1] lie."""
    return 1 if conv.layout == "nhwc" else conv.out_h * conv.out_w


__all__ = ["ConvShape", "below", "a_chunk_source", "a_element_source", "output_index", "column_stride", "LAYOUTS"]
