"""DFT and STFT as matrix products (and the window functions, constants of their size): the transform of a fixed length is linear in the (real, imag)
input, so its real matrix is built at import time (numpy's FFT applied to basis vectors, as ONNX's
reference computes) and the signal is multiplied by it on the MatMul kernel."""
from __future__ import annotations

import numpy as np
import onnx

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


@converter("STFT", since_version=17)
def stft(ctx: ConvertContext) -> str:
    x = ctx.type_of(0)  # [batch, length, 1 or 2]
    if x.rank != 3 or x.shape[-1] not in (1, 2):
        ctx.fail(f"expects a [batch, length, 1 or 2] signal, got {x}")
    step = int(ctx.constant(1, "frame_step").reshape(-1)[0])
    window = ctx.input(2) if ctx.has_input(2) else None
    length = int(ctx.constant(3, "frame_length").reshape(-1)[0]) if ctx.has_input(3) else None
    if length is None:
        length = ctx.shape(2)[0] if window is not None else x.shape[1]
    if window is not None and ctx.shape(2) != (length,):
        ctx.unsupported(f"STFT window of {ctx.shape(2)} with frame_length {length}")
    if step < 1 or not 1 <= length <= x.shape[1]:
        ctx.fail(f"frame_step {step} and frame_length {length} do not fit a signal of {x.shape[1]}")
    frames = 1 + (x.shape[1] - length) // step
    starts = np.arange(frames)[:, None] * step + np.arange(length)[None, :]
    y = ctx.emit1("Gather", [ctx.input(0), ctx.const(starts)], axis=1)  # [batch, frames, length, c]
    if window is not None:
        y = ctx.emit1("Mul", [y, ctx.reshape(window, [length, 1])])
    matrix = transform_matrix(length, x.shape[-1], length, False, bool(ctx.attr("onesided", 1)))
    return _apply_along(ctx, y, 2, matrix, 2)


def _window_positions(ctx: ConvertContext) -> tuple[np.ndarray, int]:
    size = int(ctx.constant(0, "size").reshape(-1)[0])
    if size < 1:
        ctx.fail(f"size {size} must be positive")
    periodic = int(ctx.attr("periodic", 1))
    return np.arange(size, dtype=np.float64), size if periodic else size - 1


WINDOWS = {
    "HannWindow": lambda n, span: np.sin(n * np.pi / span) ** 2,
    "HammingWindow": lambda n, span: 25.0 / 46.0 - (21.0 / 46.0) * np.cos(n * np.pi * 2 / span),
    "BlackmanWindow": lambda n, span: 0.42 - 0.5 * np.cos(n * np.pi * 2 / span) + 0.08 * np.cos(n * np.pi * 4 / span),
}


def _register_window(op: str) -> None:
    @converter(op, since_version=17)
    def window(ctx: ConvertContext) -> str:
        n, span = _window_positions(ctx)
        values = WINDOWS[op](n, span) if span > 0 else np.ones(1)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(int(ctx.attr("output_datatype", onnx.TensorProto.FLOAT)))
        return ctx.const(values.astype(dtype))


for _op in WINDOWS:
    _register_window(_op)
