"""The DEBUG level, read once from the environment variable DEBUG=N: what the compiler prints to stderr."""
from __future__ import annotations

import os
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

# What each level adds (each includes the ones below it):
#   1  one summary line per compile (core/driver/pipeline.py)
#   2  the graph after each pass (core/graph/passes/manager.py)
#   3  the optimized LLVM IR (CPU and NVPTX, core/codegen/llvm_env.py)
#   4  the unoptimized LLVM IR too (CPU)


def _level_from_environment() -> int:
    try:
        return int(os.environ.get("DEBUG", "0") or 0)
    except ValueError:  # DEBUG=yes and the like: Kiln prints nothing extra rather than refuse to start
        return 0


DEBUG: ContextVar[int] = ContextVar("DEBUG", default=_level_from_environment())


@contextmanager
def debug_level(level: int) -> Iterator[None]:
    """DEBUG is `level` inside the block (in this thread or task), whatever the environment said."""
    token = DEBUG.set(level)
    try:
        yield
    finally:
        DEBUG.reset(token)
