"""The cuda pass pipeline: the CPU's passes less the blocked layouts, half-precision MatMul operands for the
tensor cores, and int8 weights packed for dp4a."""
from __future__ import annotations

from typing import Any

from ...target import Target
from ..base import level_pass_names


def pass_names(opt_level: int) -> tuple[str, ...]:
    """-O`opt_level`'s passes less the blocked layouts; float16 MatMuls keep float16 operands for the tensor cores
    (before fusion, so their epilogues fuse as before)."""
    names = level_pass_names(opt_level, blocked_layouts=False)
    if not opt_level:
        return names
    at = names.index("fuse_ops") if "fuse_ops" in names else len(names)
    return names[:at] + ("half_matmul_operands",) + names[at:]


def pass_options(target: Target) -> dict[str, dict[str, Any]]:
    """int8 weights packed for the target's one-lane s8 dot instruction (dp4a)."""
    from ...te.intrinsics import intrinsics_for

    dots = intrinsics_for(target, lambda i: i.lanes == 1 and i.weight_dtype == "int8")  # dp4a
    return {"pack_int8_weights": {"intrinsics": tuple(i.name for i in dots)}}


__all__ = ["pass_names", "pass_options"]
