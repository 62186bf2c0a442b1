"""Runs named graph passes in order (printing the graph after each when DEBUG>=2) and says in
PASSES_BY_LEVEL which passes each -O level runs."""
from __future__ import annotations

import os
import sys
from typing import Callable

from core.graph.ir import Graph

from .eliminate_dead_code import eliminate_dead_code
from .fold_constants import fold_constants

GraphPass = Callable[[Graph], Graph]

_CLEANUP: list[tuple[str, GraphPass]] = [
    ("fold_constants", fold_constants),
    ("eliminate_dead_code", eliminate_dead_code),
]

# Later passes (fusion, layout, memory planning) are appended per level by their owners.
PASSES_BY_LEVEL: dict[int, list[tuple[str, GraphPass]]] = {
    0: list(_CLEANUP),
    1: list(_CLEANUP),
    2: list(_CLEANUP),
    3: list(_CLEANUP),
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


def optimize(graph: Graph, opt_level: int) -> Graph:
    if opt_level not in PASSES_BY_LEVEL:
        raise ValueError(f"opt_level must be one of {sorted(PASSES_BY_LEVEL)}, got {opt_level!r}")
    return run_passes(graph, PASSES_BY_LEVEL[opt_level])
