"""CausalConvWithState (opset 27): a depthwise causal 1-D convolution over a state-prefixed input,
decomposed into Concat/Slice and per-tap multiply-adds (kernels are short: one term per tap)."""
from __future__ import annotations

from .registry import ConvertContext, converter

_ACTIVATIONS = ("none", "silu", "swish")  # swish is an alias of silu


def _as(ctx: ConvertContext, x: str, dtype: str) -> str:
    return x if ctx.builder.type_of(x).dtype == dtype else ctx.emit1("Cast", [x], to=dtype)


def _time_slice(ctx: ConvertContext, x: str, start: int, size: int) -> str:
    batch, channels, _ = ctx.builder.type_of(x).shape
    return ctx.emit1("Slice", [x], starts=(0, 0, start), steps=(1, 1, 1), sizes=(batch, channels, size))


@converter("CausalConvWithState", since_version=27)
def causal_conv_with_state(ctx: ConvertContext) -> list[str]:
    x, weight = ctx.input(0), ctx.input(1)
    (_, channels, length), w_shape = ctx.shape(0), ctx.shape(1)
    activation = ctx.attr("activation", "none")
    if activation not in _ACTIVATIONS:
        ctx.fail(f"activation must be one of {', '.join(_ACTIVATIONS)}, got {activation!r}")
    if len(w_shape) != 3 or w_shape[:2] != (channels, 1):
        ctx.fail(f"weight must be [channels={channels}, 1, k], got {list(w_shape)}")
    taps = w_shape[2]
    # The input left-extended by the previous call's last k - 1 positions (zeros on the first call).
    if ctx.has_input(3):
        padded = ctx.emit1("Concat", [ctx.input(3), x], axis=2)
    else:
        padded = ctx.emit1("Pad", [x], pads=(0, 0, taps - 1, 0, 0, 0), mode="constant", value=0.0)
    # float16 taps are summed in float32 (ONNX's reference convolves in wide precision), then rounded.
    dtype = ctx.type_of(0).dtype
    wide_dtype = "float32" if dtype == "float16" else dtype
    wide_input, weight = _as(ctx, padded, wide_dtype), _as(ctx, weight, wide_dtype)
    out = None
    for tap in range(taps):
        tap_weight = ctx.emit1("Slice", [weight], starts=(0, 0, tap), steps=(1, 1, 1), sizes=(channels, 1, 1))
        coefficient = ctx.reshape(tap_weight, (channels, 1))  # per channel, broadcast over time
        term = ctx.emit1("Mul", [_time_slice(ctx, wide_input, tap, length), coefficient])
        out = term if out is None else ctx.emit1("Add", [out, term])
    if ctx.has_input(2):
        out = ctx.emit1("Add", [out, _as(ctx, ctx.reshape(ctx.input(2), (channels, 1)), wide_dtype)])
    out = _as(ctx, out, dtype)
    if activation != "none":  # SiLU of the rounded convolution, again in wide precision
        wide = _as(ctx, out, wide_dtype)
        out = _as(ctx, ctx.emit1("Mul", [wide, ctx.emit1("Sigmoid", [wide])]), dtype)
    present_state = _time_slice(ctx, padded, length, taps - 1)
    return [out, present_state]
