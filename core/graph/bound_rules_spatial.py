"""Bound rules for images whose height and width are run-time lengths (core/graph/bounded.py): Conv and
MaxPool read zeros (or -inf) past the valid edge, exactly what their own padding would give, and the valid
output size follows from the input's; global pools average over the valid part only. One rule serves one
bounded axis (core/graph/bound_rules.py) and several (core/graph/bound_rules_multi.py)."""
from __future__ import annotations

import numpy as np

from core.graph.bound_rules import BoundedNode, bound_rule, roi_align_rule
from core.graph.bound_rules_multi import multi_rule
from core.graph.bounded import Bound, arithmetic, combined, length_constant, masked, parts_of


def _spatial_parts(node: BoundedNode) -> tuple[Bound, ...]:
    if any(index for index, _ in node.bounded()) or node.type(0).rank != 4:
        raise node.refuse("only the image (input 0, NCHW) may have run-time sizes")
    parts = parts_of(node.bound(0))
    if any(p.axis < 2 for p in parts):
        raise node.refuse("its batch or channels have a run-time length")
    return parts


def _masked_input(node: BoundedNode, parts, fill) -> str:
    value = node.inputs[0]
    for part in parts:
        value = masked(node.builder, value, fill, part)
    return value


def _window_length(node: BoundedNode, part: Bound, kernel: int) -> Bound:
    """The valid output length along a windowed axis: floor((n + pads - dilation*(kernel-1) - 1) / stride) + 1."""
    j = part.axis - 2
    stride, dilation = node.attrs["strides"][j], node.attrs.get("dilations", (1, 1))[j]
    pads = node.attrs["pads"][j] + node.attrs["pads"][j + 2]
    b = node.builder
    shifted = arithmetic(b, "Add", part.length, length_constant(b, pads - dilation * (kernel - 1) - 1 + stride))
    length = arithmetic(b, "Max", shifted, length_constant(b, 0))
    if stride > 1:
        length = arithmetic(b, "Div", length, length_constant(b, stride))
    return Bound(length, part.axis)


@bound_rule("Conv")
@multi_rule("Conv")
def _conv(node: BoundedNode) -> list[str]:
    parts = _spatial_parts(node)
    kernel = node.type(1).shape[2:]
    outputs = node.emit([_masked_input(node, parts, 0)] + node.inputs[1:])
    return _bounded(node, outputs, [_window_length(node, p, kernel[p.axis - 2]) for p in parts])


@bound_rule("MaxPool")
@multi_rule("MaxPool")
def _max_pool(node: BoundedNode) -> list[str]:
    parts = _spatial_parts(node)
    if node.attrs.get("ceil_mode"):
        raise node.refuse("ceil_mode over a run-time size")
    outputs = node.emit([_masked_input(node, parts, -np.inf)])
    kernel = node.attrs["kernel"]
    return _bounded(node, outputs, [_window_length(node, p, kernel[p.axis - 2]) for p in parts])


@bound_rule("GlobalMaxPool")
@multi_rule("GlobalMaxPool")
def _global_max_pool(node: BoundedNode) -> list[str]:
    return node.emit([_masked_input(node, _spatial_parts(node), -np.inf)])


@bound_rule("GlobalAveragePool")
@multi_rule("GlobalAveragePool")
def _global_average_pool(node: BoundedNode) -> list[str]:
    """The mean of the zero-masked image times (bucket area / valid area)."""
    parts, b = _spatial_parts(node), node.builder
    x = node.type(0)
    (mean,) = node.emit([_masked_input(node, parts, 0)])
    area = length_constant(b, int(np.prod([x.shape[a] for a in (2, 3) if a not in {p.axis for p in parts}])))
    for part in parts:
        area = arithmetic(b, "Mul", area, part.length)
    area = b.add_unbounded_node("Cast", [area], 1, "area", to=x.dtype)[0]
    full = b.add_constant(np.array([x.shape[2] * x.shape[3]], x.dtype), "area")
    return [arithmetic(b, "Div", arithmetic(b, "Mul", mean, full), area)]


@multi_rule("RoiAlign")
def _roi_align(node: BoundedNode) -> list[str]:
    return roi_align_rule(node, parts_of(node.bound(0)))


def _bounded(node: BoundedNode, outputs: list[str], parts) -> list[str]:
    bound = combined(parts)
    for value in outputs:
        node.builder.bounds[value] = bound
    return outputs


__all__: list[str] = []
