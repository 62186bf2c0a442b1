"""Which bound rule takes an op with bounded inputs (core/graph/bounded.py): the several-axes rules
(bound_rules_multi.py, images in bound_rules_spatial.py) when an input is bounded along several axes or the
inputs along different ones, else the one-axis rules (bound_rules.py)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from core.graph import bound_rules_spatial  # noqa: F401  (registers the Conv and pool rules)
from core.graph.bound_rules import BoundedNode, one_axis_rule
from core.graph.bound_rules_multi import add_multi_bounded_node, needs_multi

if TYPE_CHECKING:
    from core.graph.builder import GraphBuilder


def add_bounded_node(builder: "GraphBuilder", op: str, inputs: list[str], num_outputs: int, hint: str,
                     attrs: dict) -> list[str]:
    node = BoundedNode(builder, op, inputs, attrs, num_outputs, hint)
    if needs_multi(node):
        return add_multi_bounded_node(node)
    return one_axis_rule(node)(node)


__all__ = ["add_bounded_node"]
