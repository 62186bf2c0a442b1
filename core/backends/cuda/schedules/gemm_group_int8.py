"""Fused groups the int8 tensor-core GEMM computes whole: a MatMulIntegerPacked whose weights are packed for dp4a
(n-major int8 [n, k / 4, 1, 4]: the n-major B the kernel reads as it is), its data uint8 or int8 as the instruction
takes it (no shift), then an int32 bias Add and a Requantize (a QLinearMatMul's, or a QDQ MatMul's made integer by
integer_qdq), each optional. The choice against dp4a is the plan's (gemm_mma_int8.prefers_mma: sm_80 on, at least
64 rows, 32 columns and 4M multiply-adds); a group it declines keeps dp4a's scheduled loops (schedules/integer.py)."""
from __future__ import annotations

import math
from typing import Optional, Sequence

from ....graph.ir import Graph, Node
from ....kernels.gemm_plan.gemm_mma import shared_limit
from ....kernels.gemm_plan.gemm_mma_int8 import (A_DTYPES, Int8GemmProblem, config_error, default_config, grid,
                                                 int8_gemm_attr, param_roles, prefers_mma)
from ....target import Target
from ....tir.stmt import PrimFunc
from .gemm_group import SM_COUNTS, launch_only_kernel
from .group_match import static_shape


def _per_column(graph: Graph, value: str, n: int, dtype: str) -> Optional[str]:
    """"column" when `value` holds one `dtype` per output column ([n], or [1, .., n]), "scalar" when one value."""
    t = graph.type_of(value)
    if t.dtype != dtype or not static_shape(t.shape):
        return None
    if t.numel == 1:
        return "scalar"
    return "column" if t.numel == n and t.shape[-1] == n else None


def match_int8_gemm_group(nodes: Sequence[Node], graph: Graph,
                          outputs: Sequence[str]) -> Optional[tuple[Int8GemmProblem, dict]]:
    """(the problem, role -> graph value) when the group is such a packed MatMul and chain; None otherwise."""
    if len(outputs) != 1 or not nodes or nodes[0].op != "MatMulIntegerPacked":
        return None
    mm = nodes[0]
    a, packed, correction = mm.inputs[:3]
    ta, tp = graph.type_of(a), graph.type_of(packed)
    n, k = int(mm.attr("columns")), int(mm.attr("depth"))
    if (mm.attr("data_shift") != 0 or ta.dtype not in A_DTYPES or tp.dtype != "int8" or not static_shape(ta.shape)
            or tuple(tp.shape) != (n, k // 4, 1, 4) or k % 4):
        return None
    roles = {"a": a, "b": packed, "correction": correction}
    if len(mm.inputs) > 3 and mm.inputs[3]:
        roles["zero"] = mm.inputs[3]
    fields = {"m": math.prod(ta.shape[:-1]), "n": n, "k": k, "a_dtype": ta.dtype, "run_time_zero": "zero" in roles}
    produced = {o for node in nodes for o in node.outputs}
    current = mm.outputs[0]
    for node in nodes[1:]:
        if current not in node.inputs or len(node.outputs) != 1 or "multiplier" in roles:
            return None
        other = next((i for i in node.inputs if i != current), None)
        if other is None:
            return None
        if node.op == "Add" and "bias" not in roles and other not in produced and len(node.inputs) == 2 \
                and _per_column(graph, other, n, "int32") == "column":
            roles["bias"], fields["bias"] = other, True
        elif node.op == "Requantize" and node.inputs[0] == current and other not in produced:
            kind = _per_column(graph, other, n, "float32")
            if kind is None:
                return None
            roles["multiplier"] = other
            fields.update(multiplier=kind, out_dtype=node.attr("to"), zero_point=int(node.attr("zero_point")),
                          lo=int(node.attr("min")), hi=int(node.attr("max")))
        else:
            return None
        current = node.outputs[0]
    if current != outputs[0] or max(math.prod(ta.shape), fields["m"] * n) >= 2 ** 31:  # the kernel's i32 offsets
        return None
    try:
        return Int8GemmProblem(**fields), roles
    except ValueError:  # k or n not whole 16-byte rows
        return None


def int8_gemm_group_kernel(nodes: Sequence[Node], graph: Graph, target: Target, name: str, outputs: Sequence[str],
                           inputs: Sequence[str]) -> Optional[PrimFunc]:
    """The group's kernel as the int8 tensor-core GEMM, or None: not such a group, a shape dp4a serves better (the
    rule in gemm_mma_int8.prefers_mma), or tiles that do not fit."""
    found = match_int8_gemm_group(nodes, graph, outputs)
    if found is None:
        return None
    problem, roles = found
    if not prefers_mma(problem.m, problem.n, problem.k, target.cpu):
        return None
    cfg = default_config(problem, target.max_shared_bytes, SM_COUNTS.get(target.cpu, 108))
    if config_error(cfg, problem, shared_limit(target.cpu)):
        return None
    where = {role: list(inputs).index(roles[role]) for role in param_roles(problem) if role != "c"}
    where["c"] = len(inputs)
    return launch_only_kernel(name, graph, inputs, outputs, cfg.threads, grid(cfg, problem),
                              int8_gemm_attr(problem, cfg, where))


__all__ = ["match_int8_gemm_group", "int8_gemm_group_kernel"]
