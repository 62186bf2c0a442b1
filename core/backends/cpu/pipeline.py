"""The CPU pass pipeline: every -O level's passes, the blocked layouts and weight panels sized to the target."""
from __future__ import annotations

from typing import Any

from ...target import Target
from ..base import level_pass_names


def pass_names(opt_level: int, blocked_layouts: bool = True) -> tuple[str, ...]:
    """The optimization passes -O`opt_level` runs (what the report lists)."""
    return level_pass_names(opt_level, blocked_layouts)


def pass_options(target: Target, quick: bool = False) -> dict[str, dict[str, Any]]:
    """The passes' keyword arguments that depend on `target`: its vector width, register tile and dot instructions;
    `quick` (kiln compile --quick): direct convs only, as Winograd kernels cost most of a cold quick build (resnet18:
    its four F(4x4) kernels ~60% of the CPU seconds, in lowering and LLVM)."""
    from ...packing.panels import micro_tile
    from ...te.intrinsics import intrinsics_for

    # 8-bit weights packed for the best s8-weight dot-product instruction the target's features have
    dots = intrinsics_for(target, lambda i: i.weight_dtype == "int8")
    panel, tile_rows = micro_tile(target.lanes("float32"), target.vector_registers)
    # blocks of one vector of floats; quick: direct convs (resnet18 measured in README, "Compile time": F(2x2)-only
    # Winograd halves the default's build CPU and runs 15% slower, direct convs quarter it and run ~1.7x slower)
    return {"alter_layout": {"lanes": target.lanes("float32"), "max_winograd_tile": 0 if quick else 4},
            "alter_layout_3d": {"lanes": target.lanes("float32")},
            "pack_matmul_weights": {"panel": panel, "tile_rows": tile_rows},  # float GEMM's register tile
            "pack_int8_weights": {"intrinsics": tuple(i.name for i in dots)}}


__all__ = ["pass_names", "pass_options"]
