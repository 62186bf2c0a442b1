"""Runs named graph passes in order (printing the graph after each when DEBUG>=2); LEVELS says
which registered passes each -O level runs (the table in README.md), each target kind's pipeline
(core/backends/<kind>/pipeline.py) which of them it runs, with which options."""
from __future__ import annotations

import sys

from core.debug import DEBUG
from core.graph.ir import Graph

from . import alter_layout, cse, eliminate_dead_code, fold_constants, fold_scale_bias, fuse, simplify  # noqa: F401
from . import alter_layout_3d  # noqa: F401 (registers: 3-D conv regions in NCDHW[x]c)
from . import alter_layout_int8  # noqa: F401 (registers alter_layout's rules for 8-bit convs)
from . import pack_matmul_weights  # noqa: F401 (registers: constant MatMul weights packed into panels)
from . import pack_int8_weights  # noqa: F401 (registers: constant MatMulInteger weights packed for a dot intrinsic)
from . import patch_conv_as_matmul  # noqa: F401 (registers: patch-embedding convs as one GEMM)
from . import widen_narrow_floats  # noqa: F401 (registers: bfloat16/float8 accumulate in float32)
from . import integer_qdq  # noqa: F401 (registers: QDQ Conv/MatMul as integer ops + Requantize)
from . import half_matmul_operands  # noqa: F401 (registers: float16 MatMul operands for GPU tensor cores)
from . import fuse_attention  # noqa: F401 (registers: MatMul-Softmax-MatMul as one SoftmaxAttention)
from . import flatten_matmul_rows  # noqa: F401 (registers: batched A x 2-D B as one GEMM over A's rows)
from .registry import GraphPass

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
    3: _CLEANUP + ("fuse_attention", "patch_conv_as_matmul", "flatten_matmul_rows", "pack_matmul_weights",
                   "pack_int8_weights", "alter_layout", "alter_layout_3d", "eliminate_dead_code", "fuse_ops"),
}
# Not optimizations but semantics, so every level runs them first (and LEVELS, the optimization table
# the report shows, leaves them out): accumulating ops on bfloat16/float8 compute in float32, and quantized
# (QDQ) Conv/MatMul run as integer ops (integer_qdq) before any pass folds their int8 weights to float.
REQUIRED: tuple[str, ...] = ("widen_narrow_floats", "integer_qdq")


def run_passes(graph: Graph, passes: list[tuple[str, GraphPass]]) -> Graph:
    for name, graph_pass in passes:
        graph = graph_pass(graph)
        if DEBUG.get() >= 2:
            print(f"// after {name}\n{graph}", file=sys.stderr)
    return graph


def level_passes(opt_level: int, skipped: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """The pass names -O`opt_level` runs, less `skipped` (those a backend's kernels do not suit)."""
    if opt_level not in LEVELS:
        raise ValueError(f"opt_level must be one of {sorted(LEVELS)}, got {opt_level!r}")
    return tuple(name for name in LEVELS[opt_level] if name not in skipped)

