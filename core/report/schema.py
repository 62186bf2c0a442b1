"""The report's schema: `report.json`'s stable keys (DESIGN.md), built from what a compile measured."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

if TYPE_CHECKING:
    from ..lowering.executable import Executable
    from ..target import Target

SCHEMA_VERSION = 1


def build_report(*, metadata: Mapping[str, Any], target: "Target", opt_level: int, nodes_in: int, exe: "Executable",
                 passes: Sequence[str], kernel_times: Mapping[str, float], tuned_kernels: set[str], tuning: dict,
                 validation: dict, latency: dict, timings: dict[str, float], threads: int,
                 onnx_nodes: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
    """`report.json` of one compile; `kernel_times` is by compiled function (kernels sharing one share its time);
    `onnx_nodes` names the ONNX node behind a graph node's name (the model's own node names, where it has them)."""
    onnx_nodes = onnx_nodes or {}
    return {
        "schema": SCHEMA_VERSION,
        "model": {"sha256": metadata["model_sha256"], "inputs": metadata["inputs"], "outputs": metadata["outputs"]},
        "target": target.name, "opt_level": opt_level, "compiler_version": metadata["compiler_version"],
        "graph": {"nodes_in": nodes_in, "kernels": len(exe.kernels),
                  "fusion_groups": [{"kernel": k.name, "ops": list(k.ops)} for k in exe.kernels if len(k.ops) > 1],
                  "layout_transforms": sum("LayoutTransform" in k.ops for k in exe.kernels), "passes": list(passes)},
        "memory": {"arena_bytes": exe.memory.arena_bytes, "naive_bytes": exe.memory.naive_bytes,
                   "weights_bytes": len(exe.weights)},
        "kernels": [{"name": k.name, "ops": list(k.ops), "flops": k.flops, "time_ms": kernel_times.get(k.func),
                     "gflops": (k.flops / kernel_times[k.func] / 1e6) if kernel_times.get(k.func) else None,
                     "tuned": k.name in tuned_kernels,
                     "onnx_nodes": list(dict.fromkeys(onnx_nodes[n] for n in k.nodes if n in onnx_nodes))}
                    for k in exe.kernels],
        "tuning": tuning,
        "validation": validation, "latency_ms": latency, "timings_s": timings,
        "threads": threads,
    }
