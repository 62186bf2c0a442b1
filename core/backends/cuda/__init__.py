"""The CUDA backend: NCHW tiles in shared memory, PTX from LLVM's NVPTX backend launched by a host
library through the CUDA driver; jobs go to the `gpu` queue, whose workers have an NVIDIA GPU."""
from __future__ import annotations

import glob
from pathlib import Path
from typing import Any, Optional, Sequence

from ...target import CUDA_KIND, Target, host_target
from .. import register_backend
from ..base import Backend
from . import pipeline, schedules  # noqa: F401 (schedules: registers the cuda schedules and computes)


@register_backend
class CudaBackend(Backend):
    kind = CUDA_KIND
    host_code = False
    has_shared = True
    blocked_layouts = False
    device_queue = "gpu"  # validation runs the artifact, so even an untuned job needs the GPU
    profiles_in_runtime = True  # device timers around each launch of the model's own run
    # Kernels written as one sequential loop program (te.extern: scans, compaction, TopK, NMS, scatters) that
    # the cuda schedules refuse (UnsupportedOnGPUError), and Unique, whose tiles cannot be placed on a GPU.
    unsupported_ops = frozenset({"TopK", "CumSum", "CumProd", "NonZero", "Compress", "Unique",
                                 "NonMaxSuppression", "ScatterElements", "ScatterND", "PairwiseCoupling",
                                 "If", "Loop"})  # If/Loop run at run time: CPU entries only (control_flow.py)

    def pass_names(self, opt_level: int) -> tuple[str, ...]:
        return pipeline.pass_names(opt_level)

    def weight_storage_dtypes(self, target: Target) -> tuple[str, ...]:
        """float16 and bfloat16 weights widen in a conversion per load (cvt), and a half-precision MatMul feeds them
        to the tensor cores as they are (gemm_group.py): `--precision fp16|bf16` computes its GEMMs in half."""
        return ("float16", "bfloat16")

    def pass_options(self, target: Target, quick: bool = False) -> dict[str, dict[str, Any]]:
        return pipeline.pass_options(target)  # its passes have nothing cheaper to build

    def fallback_schedules(self):
        from .schedules.injective import schedule_injective
        from .schedules.reduce import schedule_reduce

        return schedule_injective, schedule_reduce

    def epilogue_schedule(self):
        from .schedules.epilogue import schedule_epilogue

        return schedule_epilogue

    def finish_graph(self, graph, target: Target):
        """Convs' K made whole 16-byte rows by zero taps (conv_taps.py), then activations between tensor-core
        groups stored in half precision (half_activations.py)."""
        from .schedules.conv_taps import widen_kernel_rows
        from .schedules.half_activations import half_activations

        return half_activations(widen_kernel_rows(graph, target), target)

    def group_kernel(self, nodes, graph, target: Target, name: str, outputs, inputs):
        """A float16/bfloat16 MatMul or Conv and its epilogue chain: the tensor-core GEMM (gemm_group.py); a large
        enough int8 MatMul and its requantization: the int8 tensor-core GEMM (gemm_group_int8.py)."""
        from .schedules.gemm_group import gemm_group_kernel
        from .schedules.gemm_group_int8 import int8_gemm_group_kernel

        return (gemm_group_kernel(nodes, graph, target, name, outputs, inputs)
                or int8_gemm_group_kernel(nodes, graph, target, name, outputs, inputs))

    def load_templates(self) -> None:
        from . import templates  # noqa: F401 (registers the cuda tuning templates)

    def build_library(self, funcs: Sequence, target: Target, out_path: Path, plan=None) -> Path:
        from ...codegen.build_cuda import build_cuda_library

        return build_cuda_library(funcs, target, out_path, plan)

    def build_candidate(self, funcs: Sequence, target: Target, directory: Path, name: str) -> Path:
        """PTX and its launches, which the GPU runner's driver loads."""
        from ...codegen.cuda_kernels import save_cuda_kernels

        return save_cuda_kernels(funcs, target, Path(directory) / f"{name}.cuda.json")

    def runtime_metadata(self, target: Target) -> dict[str, Any]:
        """The device kind and architecture, and the host the launching library runs on."""
        return {"target_kind": self.kind, "needs_cuda_driver": True, "cuda_arch": target.cpu,
                "host_triple": host_target().triple}

    def has_device(self, target: Target) -> bool:
        """An NVIDIA GPU and its driver, found without cuInit."""
        from ...runtime.loader import _cuda_driver

        return bool(glob.glob("/dev/nvidia[0-9]*")) and _cuda_driver() is not None

    def cannot_run_reason(self, target: Target) -> Optional[str]:
        from ...codegen.ptxas import find_ptxas
        from ...runtime.loader import cuda_device_count

        if cuda_device_count() == 0:
            return (f"no NVIDIA GPU on this machine: the {target.cpu} artifact was built"
                    f"{' and its PTX assembled by ptxas' if find_ptxas() else ''} but not run")
        return None

    def can_measure(self, target: Target) -> bool:
        """Candidates run on this machine's GPU, through the CUDA driver."""
        from ...runtime.loader import cuda_device_count

        return cuda_device_count() > 0

    def runner_options(self, target: Target) -> dict[str, Any]:
        return {"memory_bytes": 0}  # the CUDA driver reserves far more address space than a limit would allow

    def report_device(self, target: Target, ran: bool) -> Optional[dict[str, Any]]:
        from ...codegen.ptxas import find_ptxas

        return {"kind": self.kind, "arch": target.cpu, "ptxas_checked": find_ptxas() is not None, "ran": ran}
