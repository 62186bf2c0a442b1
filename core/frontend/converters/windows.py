"""Window attributes shared by Conv and pooling: ONNX auto_pad resolved to explicit pads, and
lifting 1-D (N, C, L) windows to the IR's 2-D ops with a unit height."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .registry import ConvertContext


@dataclass(frozen=True)
class Window:
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]  # ONNX layout: begins of every spatial axis, then ends


def spatial_rank(ctx: ConvertContext, kind: str, most: int = 2) -> int:
    """The number of spatial axes of input 0 (1 to `most`)."""
    rank = ctx.type_of(0).rank
    if rank == 5 and most < 3:
        ctx.unsupported(f"3-D {kind}")
    if not 3 <= rank <= most + 2:
        shapes = ["(N, C, L)", "(N, C, H, W)", "(N, C, D, H, W)"][:most]
        ctx.fail(f"{kind} expects a {' or '.join(shapes)} input, got {ctx.type_of(0)}")
    return rank - 2


def _ints(ctx: ConvertContext, name: str, default: Sequence[int], count: int) -> tuple[int, ...]:
    value = tuple(int(v) for v in ctx.attr(name, default))
    if len(value) != count:
        ctx.fail(f"attribute {name}={list(value)} needs {count} values")
    return value


def resolve_window(ctx: ConvertContext, sizes: Sequence[int], kernel: Sequence[int]) -> Window:
    count = len(sizes)
    strides = _ints(ctx, "strides", [1] * count, count)
    dilations = _ints(ctx, "dilations", [1] * count, count)
    if any(s < 1 for s in strides) or any(d < 1 for d in dilations):
        ctx.fail(f"strides {list(strides)} and dilations {list(dilations)} must be positive")
    auto_pad = ctx.attr("auto_pad", "NOTSET") or "NOTSET"
    if auto_pad == "NOTSET":
        pads = _ints(ctx, "pads", [0] * (2 * count), 2 * count)
        if any(p < 0 for p in pads):
            ctx.unsupported("negative pads")
    elif auto_pad == "VALID":
        pads = (0,) * (2 * count)
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begins, ends = [], []
        for size, k, s, d in zip(sizes, kernel, strides, dilations):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small, large = total // 2, total - total // 2
            begins.append(small if auto_pad == "SAME_UPPER" else large)
            ends.append(large if auto_pad == "SAME_UPPER" else small)
        pads = tuple(begins + ends)
    else:
        ctx.fail(f"unknown auto_pad {auto_pad!r}")
    return Window(tuple(kernel), strides, dilations, pads)


def as_2d(window: Window) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int, int, int]]:
    """(kernel, strides, dilations, pads) for the IR; a 1-D window gets a unit leading axis."""
    if len(window.kernel) == 2:
        return window.kernel, window.strides, window.dilations, window.pads  # type: ignore[return-value]
    return ((1, window.kernel[0]), (1, window.strides[0]), (1, window.dilations[0]),
            (0, window.pads[0], 0, window.pads[1]))


def lift_1d(ctx: ConvertContext, value: str) -> str:
    shape = ctx.builder.type_of(value).shape
    return ctx.reshape(value, shape[:2] + (1,) + shape[2:])


def lower_1d(ctx: ConvertContext, value: str) -> str:
    shape = ctx.builder.type_of(value).shape
    return ctx.reshape(value, shape[:2] + shape[3:])
