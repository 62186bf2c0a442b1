"""The `gemm_mma` attribute of a tensor-core GEMM kernel (problem, tile config, which parameter plays which role): written by the cuda backend's gemm_group.py, read by the NVPTX emitter."""
from __future__ import annotations

import json
from dataclasses import asdict
from typing import Optional

from ...tir.stmt import PrimFunc
from .conv_mma import ConvShape
from .gemm_mma import GemmConfig, GemmProblem
from .gemm_wgmma import WgmmaConfig

ATTR = "gemm_mma"


def gemm_attr(problem: GemmProblem, cfg: "GemmConfig | WgmmaConfig", params: dict[str, int]) -> dict[str, str]:
    """The PrimFunc attributes that make a kernel this GEMM (`params`: role -> parameter index; a WgmmaConfig: the
    sm_90a warpgroup kernel)."""
    kind = {"kernel": "wgmma"} if isinstance(cfg, WgmmaConfig) else {}
    return {ATTR: json.dumps({"problem": asdict(problem), "config": asdict(cfg), "params": params, **kind},
                             sort_keys=True)}


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
    config = WgmmaConfig if data.get("kernel") == "wgmma" else GemmConfig
    return GemmProblem(**problem), config(**data["config"]), data["params"]
