"""The pass registry: every graph pass is a function Graph -> Graph registered under a name."""
from __future__ import annotations

from typing import Callable

from core.graph.ir import Graph

GraphPass = Callable[[Graph], Graph]

_PASSES: dict[str, GraphPass] = {}


def register_pass(name: str) -> Callable[[GraphPass], GraphPass]:
    """Decorator: `@register_pass("cse")` makes the pass available to the opt-level table by name."""

    def wrap(fn: GraphPass) -> GraphPass:
        if name in _PASSES:
            raise ValueError(f"graph pass {name} registered twice")
        _PASSES[name] = fn
        return fn

    return wrap


def get_pass(name: str) -> GraphPass:
    try:
        return _PASSES[name]
    except KeyError:
        raise KeyError(f"no graph pass named {name!r}") from None
