"""Fused groups the tensor-core GEMM computes whole: a float16/bfloat16 MatMul (A [..., m, k] @ B [k, n]; or a float32
A times a weight stored in half precision, `--precision fp16|bf16`) followed by a chain of Cast, bias or residual
Add, Relu and Sigmoid. Such a group becomes a PrimFunc whose loops only bind the
launch grid and whose `gemm_mma` attribute (problem, tile config, which parameter plays which role) tells the
NVPTX backend to emit core/codegen/mma_gemm.py's kernel in its place."""
from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Optional, Sequence

from ....graph.ir import Graph, Node
from ....target import Target
from ....tir.expr import Buffer, IntImm, Var
from ....tir.stmt import For, ForKind, PrimFunc, Seq
from .gemm_mma import OPERAND_DTYPES, GemmConfig, GemmProblem, config_error, default_config, grid, shared_limit

ATTR = "gemm_mma"
ACTIVATIONS = {"Relu": "relu", "Sigmoid": "sigmoid"}
SM_COUNTS = {"sm_80": 108, "sm_86": 84, "sm_89": 128, "sm_90": 132}


def _static(shape) -> bool:
    return all(isinstance(d, int) for d in shape)


def match_gemm_group(nodes: Sequence[Node], graph: Graph, outputs: Sequence[str]) -> Optional[tuple[GemmProblem, dict]]:
    """(the problem, role -> graph value) when the group is a half-precision MatMul and an epilogue chain the
    kernel fuses; None otherwise (the group keeps its scheduled loops)."""
    if len(outputs) != 1:
        return None
    # A half-precision compile stores weights narrow, widened by a Cast at the top of the body: the GEMM reads the
    # narrow weight itself (and rounds a float32 A to it as it copies).
    at = next((i for i, node in enumerate(nodes) if node.op == "MatMul"), None)
    if at is None or any(node.op != "Cast" or graph.type_of(node.inputs[0]).dtype not in OPERAND_DTYPES
                         for node in nodes[:at]):
        return None
    mm, widened = nodes[at], {node.outputs[0]: node.inputs[0] for node in nodes[:at]}
    if set(widened) - {mm.inputs[1]}:  # a widening the MatMul's B does not use
        return None
    a, b = mm.inputs[0], widened.get(mm.inputs[1], mm.inputs[1])
    ta, tb = graph.type_of(a), graph.type_of(b)
    if (tb.dtype not in OPERAND_DTYPES or ta.dtype not in (tb.dtype, "float32") or len(tb.shape) != 2
            or len(ta.shape) < 2 or not _static(ta.shape) or not _static(tb.shape)):
        return None
    m, k, n = math.prod(ta.shape[:-1]), ta.shape[-1], tb.shape[1]
    roles = {"a": a, "b": b}
    produced = {o for node in nodes for o in node.outputs}
    current, steps, extra_dtypes = mm.outputs[0], [], set()
    dtype = graph.type_of(current).dtype
    for node in nodes[at + 1:]:
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
            role = "bias" if math.prod(t.shape) == n and t.shape[-1] == n else "residual"
            if role in roles or (role == "residual" and tuple(t.shape) != tuple(ta.shape[:-1]) + (n,)):
                return None
            roles[role] = other
            steps.append(role)
            extra_dtypes.add(t.dtype)
        else:
            return None
        current = node.outputs[0]
    if current != outputs[0] or len(extra_dtypes) > 1:  # bias and residual are read as one dtype
        return None
    try:
        return GemmProblem(m, n, k, tb.dtype, graph.type_of(current).dtype, tuple(steps), "".join(extra_dtypes),
                           ta.dtype if ta.dtype != tb.dtype else ""), roles
    except ValueError:  # k or n not whole 16-byte rows
        return None


def gemm_group_kernel(nodes: Sequence[Node], graph: Graph, target: Target, name: str, outputs: Sequence[str],
                      inputs: Sequence[str]) -> Optional[PrimFunc]:
    """The group's kernel as a tensor-core GEMM (None when it is not one, or its tiles do not fit)."""
    if int(target.cpu.removeprefix("sm_") or 0) < 80:  # cp.async and ldmatrix with m16n8k16: sm_80 and later
        return None
    found = match_gemm_group(nodes, graph, outputs)
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
    return GemmProblem(**problem), GemmConfig(**data["config"]), data["params"]


__all__ = ["match_gemm_group", "gemm_group_kernel", "gemm_of", "ATTR"]
