"""Fused groups the tensor-core GEMM computes whole: a float16/bfloat16 MatMul (A [..., m, k] @ B [k, n]; or a
float32 A times a weight stored in half precision, `--precision fp16|bf16`) followed by a chain of Cast, bias or
residual Add, Relu and Sigmoid; or such a Conv as its implicit GEMM (conv_group.py). Such a group becomes a PrimFunc
whose loops only bind the launch grid and whose `gemm_mma` attribute (core/kernels/gemm_plan/kernel_attr.py: problem,
tile config, which parameter plays which role) tells the NVPTX backend to emit core/codegen/mma_gemm.py's kernel in
its place (and, split along K, its `_reduce` companion: nvptx.split_reduce_name); on `cuda -arch=sm_90a` a MatMul
group is core/codegen/wgmma_gemm.py's warpgroup kernel instead."""
from __future__ import annotations

import math
from typing import Optional, Sequence

from ....graph.ir import Graph, Node
from ....kernels.gemm_plan.gemm_mma import OPERAND_DTYPES, GemmProblem, config_error, default_config, grid, shared_limit
from ....kernels.gemm_plan import gemm_wgmma as wgmma
from ....kernels.gemm_plan.kernel_attr import gemm_attr
from ....target import Target
from ....tir.expr import Buffer, IntImm, Var
from ....tir.stmt import For, ForKind, PrimFunc, Seq
from .conv_group import match_conv_group
from .group_match import anchored, epilogue_chain, static_shape

SM_COUNTS = {"sm_80": 108, "sm_86": 84, "sm_89": 128, "sm_90": 132, "sm_90a": 132}
WGMMA_ARCH = "sm_90a"  # the arch whose MatMul groups run the wgmma kernel (why not sm_90: core/target.py)


def match_gemm_group(nodes: Sequence[Node], graph: Graph, outputs: Sequence[str]) -> Optional[tuple[GemmProblem, dict]]:
    """(the problem, role -> graph value) when the group is a half-precision MatMul and an epilogue chain the
    kernel fuses; None otherwise (the group keeps its scheduled loops)."""
    found = anchored(nodes, graph, outputs, "MatMul")
    if found is None:
        return None
    at, mm, b, _ = found
    a = mm.inputs[0]
    ta, tb = graph.type_of(a), graph.type_of(b)
    if (tb.dtype not in OPERAND_DTYPES or ta.dtype not in (tb.dtype, "float32") or len(tb.shape) != 2
            or len(ta.shape) < 2 or not static_shape(ta.shape) or not static_shape(tb.shape)):
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


def gemm_group_kernel(nodes: Sequence[Node], graph: Graph, target: Target, name: str, outputs: Sequence[str],
                      inputs: Sequence[str]) -> Optional[PrimFunc]:
    """The group's kernel as a tensor-core GEMM (None when it is not one, or its tiles do not fit)."""
    if target.sm < 80:  # cp.async and ldmatrix with m16n8k16: sm_80 and later
        return None
    found = match_gemm_group(nodes, graph, outputs) or match_conv_group(nodes, graph, outputs)
    if found is None:
        return None
    problem, roles = found
    # Split along K when the tiles leave most SMs idle over a deep K (resnet50 batch 1's layer4: ~8 tiles on 132
    # SMs): the parts go to a float32 workspace the model's arena holds, summed by the kernel's `_reduce` companion.
    sm_count = SM_COUNTS.get(target.cpu, 108)
    if target.cpu == WGMMA_ARCH and not wgmma.config_error(wgmma.default_config(problem, sm_count), problem):
        cfg = wgmma.default_config(problem, sm_count)
    else:
        cfg = default_config(problem, target.max_shared_bytes, sm_count)
        if config_error(cfg, problem, shared_limit(target.cpu)):
            return None
    workspace = [Buffer("workspace", (cfg.split_k, problem.m, problem.n), "float32")] if cfg.split_k > 1 else []
    where = {role: list(inputs).index(value) for role, value in roles.items()}
    where["c"] = len(inputs)
    if cfg.split_k > 1:
        where["workspace"] = len(inputs) + 1
    return launch_only_kernel(name, graph, inputs, outputs, cfg.threads, grid(cfg, problem),
                              gemm_attr(problem, cfg, where), workspace)


def launch_only_kernel(name: str, graph: Graph, inputs: Sequence[str], outputs: Sequence[str], threads: int,
                       launch_grid: tuple[int, int, int], attrs: dict, extra: Sequence[Buffer] = ()) -> PrimFunc:
    """A PrimFunc (the group's inputs, its one output, then `extra` buffers) whose loops only bind the launch
    (`threads` x `launch_grid`, x fastest): `attrs` tell the NVPTX backend which hand-built kernel to emit."""
    params = [Buffer(f"in{i}", graph.type_of(v).shape, graph.type_of(v).dtype) for i, v in enumerate(inputs)]
    out_type = graph.type_of(outputs[0])
    params += [Buffer("out", out_type.shape, out_type.dtype), *extra]
    body = Seq(())
    launch = (("threadIdx.x", threads), *zip(("blockIdx.z", "blockIdx.y", "blockIdx.x"), reversed(launch_grid)))
    for tag, extent in launch:
        body = For(Var(tag.replace(".", "_"), "int64"), IntImm(extent, "int64"), ForKind.THREAD_BINDING, body, (("thread_tag", tag),))
    return PrimFunc(name, tuple(params), body, num_inputs=len(inputs), num_outputs=1, attrs=attrs)


__all__ = ["match_gemm_group", "gemm_group_kernel", "launch_only_kernel"]
