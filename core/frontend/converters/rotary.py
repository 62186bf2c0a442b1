"""RotaryEmbedding (opset 23) decomposed into Gather, Slice, elementwise and Concat IR ops: the first
rotary_embedding_dim channels of each head rotate pairwise by the cached cos/sin of the token position."""
from __future__ import annotations

from typing import Optional, Sequence

from .registry import ConvertContext, converter


def _last_axis_slice(ctx: ConvertContext, x: str, start: int, size: int, step: int = 1) -> str:
    shape = ctx.builder.type_of(x).shape
    rank = len(shape)
    return ctx.emit1("Slice", [x], starts=(0,) * (rank - 1) + (start,), steps=(1,) * (rank - 1) + (step,),
                     sizes=tuple(shape[:-1]) + (size,))


def _position_cache(ctx: ConvertContext, cache: str, positions: Optional[str], head_axis_shape: Sequence[int]) -> str:
    """cos or sin per (batch, position) [B, S, half], gathered by `positions` when given, then shaped
    to broadcast over the heads of the working layout."""
    if positions is not None:
        cache = ctx.emit1("Gather", [cache, positions], axis=0)
    return ctx.reshape(cache, head_axis_shape)


def _interleave(ctx: ConvertContext, real: str, imaginary: str) -> str:
    """[..., half] pairs back to [..., 2 * half] as real0, imag0, real1, imag1, ..."""
    shape = ctx.builder.type_of(real).shape
    pairs = [ctx.reshape(v, tuple(shape) + (1,)) for v in (real, imaginary)]
    joined = ctx.emit1("Concat", pairs, axis=len(shape))
    return ctx.reshape(joined, tuple(shape[:-1]) + (2 * shape[-1],))


@converter("RotaryEmbedding", since_version=23)
def rotary_embedding(ctx: ConvertContext) -> str:
    return rotate_halves(ctx, ctx.input(3) if ctx.has_input(3) else None, ctx.input(1), ctx.input(2))


def rotate_halves(ctx: ConvertContext, positions: Optional[str], cos_cache: str, sin_cache: str) -> str:
    """Input 0 rotated as the node's attributes (num_heads, rotary_embedding_dim, interleaved) say,
    by the caches' rows at `positions` [B, S] (or by caches already [B, S, half] when None)."""
    shape = ctx.shape(0)
    if len(shape) == 4:  # [B, heads, S, head_size]: caches broadcast as [B, 1, S, half]
        x = ctx.input(0)
        batch, _, seq, head_size = shape
        cache_lead = (batch, 1, seq)
    elif len(shape) == 3:  # [B, S, hidden] viewed as [B, S, heads, head_size]: caches as [B, S, 1, half]
        heads = int(ctx.attr("num_heads", 0))
        if heads <= 0 or shape[2] % heads:
            ctx.fail(f"a 3-D input needs num_heads dividing its hidden size {shape[2]}, got {heads}")
        batch, seq, head_size = shape[0], shape[1], shape[2] // heads
        x = ctx.reshape(ctx.input(0), (batch, seq, heads, head_size))
        cache_lead = (batch, seq, 1)
    else:
        ctx.fail(f"expects a 3-D or 4-D input, got {list(shape)}")
    rotary = int(ctx.attr("rotary_embedding_dim", 0)) or head_size
    rotated = rotate(ctx, x, positions, cos_cache, sin_cache, cache_lead, rotary, bool(ctx.attr("interleaved", 0)))
    return ctx.reshape(rotated, shape)


def rotate(ctx: ConvertContext, x: str, positions: Optional[str], cos_cache: str, sin_cache: str,
           cache_lead: Sequence[int], rotary: int, interleaved: bool) -> str:
    """The first `rotary` channels of 4-D `x` rotated pairwise (adjacent pairs when `interleaved`, else the
    two halves) by the caches' rows at `positions`, shaped `cache_lead + (rotary / 2,)` to broadcast over x."""
    head_size = ctx.builder.type_of(x).shape[3]
    if rotary % 2 or rotary > head_size:
        ctx.fail(f"rotary_embedding_dim={rotary} must be even and at most the head size {head_size}")
    half = rotary // 2
    if any(ctx.builder.type_of(c).shape[-1] != half for c in (cos_cache, sin_cache)):
        ctx.fail(f"the caches' last dimension must be rotary_embedding_dim / 2 = {half}")
    cos, sin = (_position_cache(ctx, c, positions, tuple(cache_lead) + (half,)) for c in (cos_cache, sin_cache))

    if interleaved:
        x1, x2 = _last_axis_slice(ctx, x, 0, half, 2), _last_axis_slice(ctx, x, 1, half, 2)
    else:
        x1, x2 = _last_axis_slice(ctx, x, 0, half), _last_axis_slice(ctx, x, half, half)
    real = ctx.emit1("Sub", [ctx.emit1("Mul", [cos, x1]), ctx.emit1("Mul", [sin, x2])])
    imaginary = ctx.emit1("Add", [ctx.emit1("Mul", [sin, x1]), ctx.emit1("Mul", [cos, x2])])
    if interleaved:
        rotated = _interleave(ctx, real, imaginary)
    else:
        rotated = ctx.emit1("Concat", [real, imaginary], axis=3)
    if rotary < head_size:
        rotated = ctx.emit1("Concat", [rotated, _last_axis_slice(ctx, x, rotary, head_size - rotary)], axis=3)
    return rotated
