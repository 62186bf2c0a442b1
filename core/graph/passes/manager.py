"""Runs named graph passes in order (printing the graph after each when DEBUG>=2); LEVELS says
which registered passes each -O level runs (the table in README.md)."""
from __future__ import annotations

import os
import sys

from core.graph.ir import Graph

from . import alter_layout, cse, eliminate_dead_code, fold_constants, fold_scale_bias, fuse, simplify  # noqa: F401
from . import pack_matmul_weights  # noqa: F401 (registers: constant MatMul weights packed into panels)
from . import patch_conv_as_matmul  # noqa: F401 (registers: patch-embedding convs as one GEMM)
from . import widen_narrow_floats  # noqa: F401 (registers: bfloat16/float8 accumulate in float32)
from .registry import GraphPass, get_pass

_CLEANUP = ("fold_constants", "simplify", "cse", "fold_scale_bias", "fold_constants", "simplify",
            "eliminate_dead_code")

# O0 runs only what compiling needs (nothing: the importer already folded constants); O1 simplifies
# (folding, DCE, CSE, algebraic rewrites); O2 adds operator fusion; O3 is everything: conv regions
# in the blocked layout NCHW[x]c (before fusion, so epilogues fuse into the blocked convs; DCE then
# drops the unpacked weights); patch-embedding convs (kernel == stride) rewritten as a MatMul over
# patches, and constant MatMul weights packed into the micro-kernel's panels.
LEVELS: dict[int, tuple[str, ...]] = {
    0: (),
    1: _CLEANUP,
    2: _CLEANUP + ("fuse_ops",),
    3: _CLEANUP + ("patch_conv_as_matmul", "pack_matmul_weights", "alter_layout", "eliminate_dead_code", "fuse_ops"),
}
# Not optimizations but semantics, so every level runs them first (and LEVELS, the optimization table
# the report shows, leaves them out): accumulating ops on bfloat16/float8 compute in float32.
REQUIRED: tuple[str, ...] = ("widen_narrow_floats",)

PASSES_BY_LEVEL: dict[int, list[tuple[str, GraphPass]]] = {
    level: [(name, get_pass(name)) for name in names] for level, names in LEVELS.items()
}


def debug_level() -> int:
    try:
        return int(os.environ.get("DEBUG", "0") or 0)
    except ValueError:
        return 0


def run_passes(graph: Graph, passes: list[tuple[str, GraphPass]]) -> Graph:
    for name, graph_pass in passes:
        graph = graph_pass(graph)
        if debug_level() >= 2:
            print(f"// after {name}\n{graph}", file=sys.stderr)
    return graph


# Passes that rewrite the graph for a CPU's micro-kernels, per target kind they do not apply to: on a
# GPU, NCHW[x]c blocks (sized to a SIMD register) and B panels (sized to a 6 x 16 FMA tile) only make
# the shared-memory tiles gather strided data; the GPU schedules tile the plain NCHW conv and the
# plain MatMul themselves (fusion stays: epilogues fuse into the conv/matmul kernels there too).
CPU_ONLY: dict[str, frozenset[str]] = {"cuda": frozenset({"alter_layout", "pack_matmul_weights"})}


def level_passes(opt_level: int, target_kind: str = "cpu") -> tuple[str, ...]:
    """The pass names -O`opt_level` runs for a target of `target_kind` ("cpu", "cuda")."""
    if opt_level not in LEVELS:
        raise ValueError(f"opt_level must be one of {sorted(LEVELS)}, got {opt_level!r}")
    skipped = CPU_ONLY.get(target_kind, frozenset())
    return tuple(name for name in LEVELS[opt_level] if name not in skipped)


def optimize(graph: Graph, opt_level: int, target=None) -> Graph:
    """Run -O`opt_level`'s passes; `target` (a Target or its name; default: a CPU) drops the passes
    that only suit CPUs."""
    kind = "cpu"
    if target is not None:
        from core.target import get_target

        kind = get_target(target).kind
    names = level_passes(opt_level, kind)
    return run_passes(graph, [(name, get_pass(name)) for name in REQUIRED + names])
