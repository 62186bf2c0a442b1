"""Packs the constant 8-bit weights of MatMulInteger and ConvInteger for the target's dot-product intrinsic
at compile time (core/packing/int8.py): MatMulInteger(a, W, za, zw) with constant W and zero points becomes
MatMulIntegerPacked(a, W_blocks, correction) (za computed at run time: MatMulIntegerPacked(a, W_blocks,
correction per unit of za, za)), a group-1 ConvInteger ConvIntegerPacked (W as [C*kh*kw, O]);
their kernels are tensorized (core/te/intrinsics.py)."""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from core.graph.ir import Graph, Node, TensorType
from core.packing.int8 import column_correction, conv_weights_as_columns, pack_dot_weights, shifted_weights

from .registry import register_pass
from .rewrite import fresh_name


def _constant(graph_constants: dict, node: Node, index: int, default_dtype: str) -> Optional[np.ndarray]:
    if len(node.inputs) <= index or not node.inputs[index]:
        return np.zeros((), default_dtype)
    return graph_constants.get(node.inputs[index])


@register_pass("pack_int8_weights")
def pack_int8_weights(graph: Graph, intrinsics: tuple[str, ...] = ()) -> Graph:
    """`intrinsics`: the dot-product intrinsics the backend allows for the target, best first (none: no
    packing); each node takes the first that is exact for its weights, one taking its data's 8-bit type as it
    is before others. Only weights whose zero-point-shifted values fit int8 are packed (symmetric int8, or
    uint8 around 128); data of the other 8-bit type than the intrinsic's is shifted by 128 in the kernel."""
    if not intrinsics:
        return graph
    from core.te.intrinsics import get_intrinsic

    candidates = [get_intrinsic(name) for name in intrinsics]
    constants, types = dict(graph.constants), dict(graph.types)
    nodes: list[Node] = []
    changed = False
    for node in graph.nodes:
        rewrite = _REWRITES.get(node.op)
        packed = rewrite is not None and rewrite(node, constants, types, candidates)
        nodes.append(packed or node)
        changed = changed or bool(packed)
    return graph.replace(nodes=tuple(nodes), constants=constants, types=types) if changed else graph


def _packed(node: Node, weights: np.ndarray, constants: dict, types: dict, candidates: list,
            run_time_zero: bool = False) -> Optional[tuple[tuple[str, str], int, Optional[int], str]]:
    """(packed and correction constant names, data shift, data zero point, intrinsic) for `weights` as
    [K, N], or None. `run_time_zero`: a data zero point computed at run time (one value) is fine too; its
    correction is then per unit of it, and the zero point None."""
    a_type = types[node.inputs[0]]
    a_zero = _constant(constants, node, 2, a_type.dtype)
    b_zero = _constant(constants, node, 3, weights.dtype.name)
    if a_zero is None and not (run_time_zero and types[node.inputs[2]].numel == 1):
        return None
    if (a_zero is not None and a_zero.size != 1) or b_zero is None:
        return None
    b = shifted_weights(weights, b_zero)
    shifts = lambda i: i.inputs[0].dtype in ("int8", "uint8") and i.inputs[0].dtype != a_type.dtype  # noqa: E731
    same_data_first = sorted(candidates, key=shifts)  # (a stable sort)
    intrinsic = next((i for i in same_data_first if b is not None and i.admits(b)), None)
    if intrinsic is None:
        return None
    shift = (128 if a_type.dtype == "int8" else -128) if shifts(intrinsic) else 0  # int16 data holds either as it is
    names = []
    made = (("packed", pack_dot_weights(b, intrinsic.lanes, intrinsic.depth)),
            ("correction", column_correction(b, 1 if a_zero is None else int(a_zero) + shift)))
    for stem, value in made:
        name = fresh_name(f"{node.inputs[1]}_{stem}", types)
        value.flags.writeable = False
        constants[name], types[name] = value, TensorType(value.shape, value.dtype.name)
        names.append(name)
    return (names[0], names[1]), shift, None if a_zero is None else int(a_zero), intrinsic.name


def _matmul(node: Node, constants: dict, types: dict, candidates: list) -> Optional[Node]:
    weights = constants.get(node.inputs[1])
    if weights is None or weights.ndim != 2:
        return None
    found = _packed(node, np.asarray(weights), constants, types, candidates, run_time_zero=True)
    if found is None:
        return None
    names, shift, zero, intrinsic = found
    k, n = weights.shape
    attrs = {"columns": int(n), "depth": int(k), "data_shift": shift, "intrinsic": intrinsic}
    run_time_zero = (node.inputs[2],) if zero is None else ()  # DynamicQuantizeLinear's
    return dataclasses.replace(node, op="MatMulIntegerPacked", inputs=(node.inputs[0], *names, *run_time_zero),
                               attrs=attrs)


def _conv(node: Node, constants: dict, types: dict, candidates: list) -> Optional[Node]:
    """Group-1 convs (depthwise and grouped ones keep the generic kernel)."""
    weights = constants.get(node.inputs[1])
    if weights is None or node.attr("group") != 1:
        return None
    o, c, kh, kw = weights.shape
    found = _packed(node, conv_weights_as_columns(np.asarray(weights)), constants, types, candidates)
    if found is None:
        return None
    names, shift, zero, intrinsic = found
    attrs = {"kernel": (kh, kw), "strides": node.attr("strides"), "pads": node.attr("pads"),
             "dilations": node.attr("dilations"), "columns": o, "data_zero_point": zero, "data_shift": shift,
             "intrinsic": intrinsic}
    return dataclasses.replace(node, op="ConvIntegerPacked", inputs=(node.inputs[0], *names), attrs=attrs)


_REWRITES = {"MatMulInteger": _matmul, "ConvInteger": _conv}
