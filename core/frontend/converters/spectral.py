"""DFT and STFT as matrix products: the transform of a fixed length is linear in the (real, imag)
input, so its real matrix is built at import time (numpy's FFT applied to basis vectors, as ONNX's
reference computes) and the signal is multiplied by it on the MatMul kernel."""
from __future__ import annotations

import numpy as np

from .registry import ConvertContext, converter

MAX_MATRIX = 1 << 24  # entries of a transform matrix (64 MiB in float32): beyond it, an FFT kernel would be needed


def transform_matrix(n: int, components: int, length: int, inverse: bool, onesided: bool) -> np.ndarray:
    """[n * components, out * out_components] mapping a flattened (n, components) signal to its flattened
    (out, out_components) transform along n (numpy's n=length crops or zero-pads)."""
    basis = np.eye(n * components).reshape(n * components, n, components)
    signal = basis[..., 0] if components == 1 else basis[..., 0] + 1j * basis[..., 1]
    if not inverse:
        spectrum = np.fft.fft(signal, n=length, axis=1)
        if onesided:
            spectrum = spectrum[:, : length // 2 + 1]
        out = np.stack([spectrum.real, spectrum.imag], axis=-1)
    elif onesided:
        out = np.fft.irfft(signal, n=length, axis=1)[..., None]
    else:
        spectrum = np.fft.ifft(signal, n=length, axis=1)
        out = np.stack([spectrum.real, spectrum.imag], axis=-1)
    return out.reshape(n * components, -1)


def _apply_along(ctx: ConvertContext, x: str, axis: int, matrix: np.ndarray, out_components: int) -> str:
    """Multiplies the (axis, last) plane of x by `matrix`, putting the result back in place."""
    shape = ctx.builder.type_of(x).shape
    rank = len(shape)
    if matrix.size > MAX_MATRIX:
        ctx.unsupported(f"{ctx.op_type} of length {shape[axis]} (its transform matrix exceeds {MAX_MATRIX} entries)")
    perm = [a for a in range(rank - 1) if a != axis] + [axis, rank - 1]
    moved = ctx.emit1("Transpose", [x], perm=tuple(perm)) if perm != list(range(rank)) else x
    batch = [shape[a] for a in perm[:-2]]
    flat = ctx.reshape(moved, [int(np.prod(batch, dtype=np.int64)), shape[axis] * shape[-1]])
    dtype = ctx.builder.type_of(x).dtype
    y = ctx.emit1("MatMul", [flat, ctx.const(matrix.astype(dtype))])
    length = matrix.shape[1] // out_components
    y = ctx.reshape(y, batch + [length, out_components])
    inverse_perm = [perm.index(a) for a in range(rank)]
    return ctx.emit1("Transpose", [y], perm=tuple(inverse_perm)) if inverse_perm != list(range(rank)) else y


def _dft(ctx: ConvertContext, axis: int) -> str:
    x = ctx.type_of(0)
    if x.shape[-1] not in (1, 2) or x.rank < 3:
        ctx.fail(f"expects a [..., 1] real or [..., 2] complex signal, got {x}")
    if not x.dtype.startswith("float"):
        ctx.fail(f"expects float data, got {x}")
    axis = ctx.axis(axis, x.rank)
    if axis == x.rank - 1:
        ctx.fail("axis may not be the last (real, imaginary) axis")
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    if onesided and inverse and x.shape[-1] != 2:
        ctx.fail("an inverse one-sided DFT needs a complex input")
    if ctx.has_input(1):
        length = int(ctx.constant(1, "dft_length").reshape(-1)[0])
    else:
        length = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
    if length < 1:
        ctx.fail(f"dft_length {length} must be positive")
    matrix = transform_matrix(x.shape[axis], x.shape[-1], length, inverse, onesided)
    return _apply_along(ctx, ctx.input(0), axis, matrix, 1 if inverse and onesided else 2)


@converter("DFT", since_version=17)
def dft_17(ctx: ConvertContext) -> str:
    return _dft(ctx, int(ctx.attr("axis", 1)))


@converter("DFT", since_version=20)
def dft(ctx: ConvertContext) -> str:
    axis = int(ctx.constant(2, "axis").reshape(-1)[0]) if ctx.has_input(2) else -2
    return _dft(ctx, axis)
