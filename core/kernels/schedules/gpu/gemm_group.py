"""Fused groups the tensor-core GEMM computes whole: a float16/bfloat16 MatMul (A [..., m, k] @ B [k, n]; or a
float32 A times a weight stored in half precision, `--precision fp16|bf16`) followed by a chain of Cast, bias or
residual Add, Relu and Sigmoid; or such a Conv as its implicit GEMM (conv_group.py). Such a group becomes a PrimFunc whose loops only bind the
launch grid and whose `gemm_mma` attribute (problem, tile config, which parameter plays which role) tells the
NVPTX backend to emit core/codegen/mma_gemm.py's kernel in its place."""
from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Callable, Optional, Sequence

from ....graph.ir import Graph, Node
from ....target import Target
from ....tir.expr import Buffer, IntImm, Var
from ....tir.stmt import For, ForKind, PrimFunc, Seq
from .conv_mma import ConvShape
from .gemm_mma import OPERAND_DTYPES, GemmConfig, GemmProblem, config_error, default_config, grid, shared_limit

ATTR = "gemm_mma"
ACTIVATIONS = {"Relu": "relu", "Sigmoid": "sigmoid"}
SM_COUNTS = {"sm_80": 108, "sm_86": 84, "sm_89": 128, "sm_90": 132}


def _static(shape) -> bool:
    return all(isinstance(d, int) for d in shape)


def match_gemm_group(nodes: Sequence[Node], graph: Graph, outputs: Sequence[str]) -> Optional[tuple[GemmProblem, dict]]:
    """(the problem, role -> graph value) when the group is a half-precision MatMul and an epilogue chain the
    kernel fuses; None otherwise (the group keeps its scheduled loops)."""
    found = anchored(nodes, graph, outputs, "MatMul")
    if found is None:
        return None
    at, mm, b = found
    a = mm.inputs[0]
    ta, tb = graph.type_of(a), graph.type_of(b)
    if (tb.dtype not in OPERAND_DTYPES or ta.dtype not in (tb.dtype, "float32") or len(tb.shape) != 2
            or len(ta.shape) < 2 or not _static(ta.shape) or not _static(tb.shape)):
        return None
    m, k, n = math.prod(ta.shape[:-1]), ta.shape[-1], tb.shape[1]
    chain = epilogue_chain(nodes[at + 1:], mm.outputs[0], graph, {o for node in nodes for o in node.outputs},
                           lambda shape: math.prod(shape) == n and shape[-1] == n, tuple(ta.shape[:-1]) + (n,))
    if chain is None or chain[0] != outputs[0] or len(set(chain[2].values())) > 1:  # bias, residual: one dtype
        return None
    _, steps, dtypes, extras = chain
    try:
        return GemmProblem(m, n, k, tb.dtype, graph.type_of(outputs[0]).dtype, steps, "".join(set(dtypes.values())),
                           ta.dtype if ta.dtype != tb.dtype else ""), {"a": a, "b": b, **extras}
    except ValueError:  # k or n not whole 16-byte rows
        return None


def anchored(nodes: Sequence[Node], graph: Graph, outputs: Sequence[str], op: str) -> Optional[tuple[int, Node, str]]:
    """(its position, the group's `op` node, the weight it reads: the narrow value itself when a leading Cast
    widens it) when the group has one output, that op, and before it only widenings of its weight."""
    if len(outputs) != 1:
        return None
    # A half-precision compile stores weights narrow, widened by a Cast at the top of the body: the kernel reads the
    # narrow weight itself (and rounds a float32 A to it as it copies).
    at = next((i for i, node in enumerate(nodes) if node.op == op), None)
    if at is None or any(node.op != "Cast" or graph.type_of(node.inputs[0]).dtype not in OPERAND_DTYPES
                         for node in nodes[:at]):
        return None
    anchor, widened = nodes[at], {node.outputs[0]: node.inputs[0] for node in nodes[:at]}
    if len(anchor.inputs) < 2 or set(widened) - {anchor.inputs[1]}:  # a widening the weight does not use
        return None
    return at, anchor, widened.get(anchor.inputs[1], anchor.inputs[1])


def epilogue_chain(nodes: Sequence[Node], current: str, graph: Graph, produced: set,
                   is_bias: Callable[[tuple], bool], output_shape: tuple,
                   roles: Optional[dict] = None) -> Optional[tuple[str, tuple[str, ...], dict, dict]]:
    """(the chain's last value, its epilogue steps, role -> extra's dtype, role -> graph value) of `nodes`, a chain
    of Cast, Relu, Sigmoid and bias or residual Add each reading the one before, starting at `current`; None when
    the chain is anything else. An Add's other operand is a bias when `is_bias(its shape)`, a residual when it has
    `output_shape`; at most one of each (`roles` may bring one already, e.g. a convolution's own bias)."""
    roles, steps, dtypes = dict(roles or {}), [], {}
    dtype = graph.type_of(current).dtype
    for node in nodes:
        if current not in node.inputs or len(node.outputs) != 1:
            return None
        if node.op == "Cast":
            dtype = node.attr("to")
        elif node.op in ACTIVATIONS:
            steps.append(ACTIVATIONS[node.op])
        elif node.op == "Add" and len(node.inputs) == 2 and node.inputs[0] != node.inputs[1]:
            other = node.inputs[1] if node.inputs[0] == current else node.inputs[0]
            t = graph.type_of(other)
            if other in produced or t.dtype != dtype or not _static(t.shape):
                return None
            role = "bias" if is_bias(tuple(t.shape)) else "residual"
            if role in roles or (role == "residual" and tuple(t.shape) != tuple(output_shape)):
                return None
            roles[role] = other
            steps.append(role)
            dtypes[role] = t.dtype
        else:
            return None
        current = node.outputs[0]
    return current, tuple(steps), dtypes, roles


def gemm_group_kernel(nodes: Sequence[Node], graph: Graph, target: Target, name: str, outputs: Sequence[str],
                      inputs: Sequence[str]) -> Optional[PrimFunc]:
    """The group's kernel as a tensor-core GEMM (None when it is not one, or its tiles do not fit)."""
    if int(target.cpu.removeprefix("sm_") or 0) < 80:  # cp.async and ldmatrix with m16n8k16: sm_80 and later
        return None
    from .conv_group import match_conv_group

    found = match_gemm_group(nodes, graph, outputs) or match_conv_group(nodes, graph, outputs)
    if found is None:
        return None
    problem, roles = found
    cfg = default_config(problem, target.max_shared_bytes, SM_COUNTS.get(target.cpu, 108), split=False)
    if config_error(cfg, problem, shared_limit(target.cpu)):
        return None
    params = [Buffer(f"in{i}", graph.type_of(v).shape, graph.type_of(v).dtype) for i, v in enumerate(inputs)]
    out_type = graph.type_of(outputs[0])
    params.append(Buffer("out", out_type.shape, out_type.dtype))
    body = Seq(())
    launch = (("threadIdx.x", cfg.threads), *zip(("blockIdx.z", "blockIdx.y", "blockIdx.x"), reversed(grid(cfg, problem))))
    for tag, extent in launch:
        body = For(Var(tag.replace(".", "_"), "int64"), IntImm(extent, "int64"), ForKind.THREAD_BINDING, body, (("thread_tag", tag),))
    where = {role: list(inputs).index(value) for role, value in roles.items()}
    where["c"] = len(inputs)
    attr = json.dumps({"problem": asdict(problem), "config": asdict(cfg), "params": where}, sort_keys=True)
    return PrimFunc(name, tuple(params), body, num_inputs=len(inputs), num_outputs=1, attrs={ATTR: attr})


def gemm_of(func: PrimFunc) -> Optional[tuple[GemmProblem, GemmConfig, dict]]:
    """(problem, config, role -> parameter index) of a gemm_group_kernel, None for any other kernel."""
    attr = func.attrs.get(ATTR)
    if attr is None:
        return None
    data = json.loads(attr)
    problem = data["problem"]
    problem["epilogue"] = tuple(problem["epilogue"])
    if problem.get("conv") is not None:
        problem["conv"] = ConvShape(**problem["conv"])
    return GemmProblem(**problem), GemmConfig(**data["config"]), data["params"]


__all__ = ["match_gemm_group", "gemm_group_kernel", "gemm_of", "ATTR"]
