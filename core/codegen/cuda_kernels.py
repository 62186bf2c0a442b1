"""Calling single GPU kernels from Python (tests, the tuner's GPU measurements): the PTX of
`emit_ptx` loaded through the CUDA driver, numpy arrays in and out, device time from CUDA events.
The GPU counterpart of kernel_library.KernelLibrary, with the same call/time_ms interface."""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Sequence

import numpy as np

from ..runtime.cuda_driver import DeviceBuffer, Module
from ..target import Target
from ..tir.stmt import PrimFunc
from .build import kernel_signatures
from .kernel_library import checked_arrays
from .nvptx import LaunchConfig, emit_ptx


class CudaKernelLibrary:
    def __init__(self, ptx: str, launches: dict[str, LaunchConfig], signatures: Sequence[dict]):
        self.ptx, self.launches = ptx, launches
        self.signatures = {s["name"]: s for s in signatures}
        self.module = Module(self.ptx)

    @property
    def names(self) -> list[str]:
        return list(self.signatures)

    def _signature(self, name: "str | tuple[str, ...]") -> dict:
        first = name if isinstance(name, str) else name[0]
        if first not in self.signatures:
            raise KeyError(f"kernel {first!r} is not in this library; it has {', '.join(self.signatures)}")
        return self.signatures[first]

    def _upload(self, name: "str | tuple[str, ...]", arrays) -> list[DeviceBuffer]:
        buffers = []
        try:
            for arr in checked_arrays(self._signature(name), arrays):
                buffers.append(DeviceBuffer(arr.nbytes))
                buffers[-1].upload(arr)
        except BaseException:
            for b in buffers:
                b.free()
            raise
        return buffers

    def _launch(self, name: "str | tuple[str, ...]", buffers: list[DeviceBuffer]) -> None:
        for kernel in (name,) if isinstance(name, str) else name:
            launch = self.launches[kernel]
            self.module.launch(kernel, launch.grid, launch.block, buffers, launch.dynamic_shared_bytes)

    def call(self, name: "str | tuple[str, ...]", *arrays: np.ndarray) -> None:
        """Run kernel `name` once (or kernels `name`, in order, on the same buffers): every array is copied to
        the GPU, the outputs and workspaces back."""
        buffers = self._upload(name, arrays)
        try:
            self._launch(name, buffers)
            self.module.synchronize()
            for arr, buf in list(zip(arrays, buffers))[self._signature(name)["num_inputs"]:]:
                buf.download(arr)
        finally:
            for b in buffers:
                b.free()

    def time_ms(self, name: "str | tuple[str, ...]", *arrays: np.ndarray, repeat: int = 10, number: int = 1, warmup: int = 1) -> float:
        """Median device time of one launch in milliseconds, the data resident on the GPU."""
        buffers = self._upload(name, arrays)
        try:
            for _ in range(warmup):
                self._launch(name, buffers)
            return statistics.median(self.module.time_ms(lambda: self._launch(name, buffers), repeat, number))
        finally:
            for b in buffers:
                b.free()

    def close(self) -> None:
        self.module.close()


def load_cuda_kernels(funcs: Sequence[PrimFunc], target: Target) -> CudaKernelLibrary:
    ptx, launches = emit_ptx(funcs, target)
    return CudaKernelLibrary(ptx, launches, kernel_signatures(funcs))


def save_cuda_kernels(funcs: Sequence[PrimFunc], target: Target, path: "str | Path") -> Path:
    """Compile `funcs` to PTX and write a kernel bundle (PTX, launches, signatures; JSON) that
    `load_cuda_kernel_bundle` runs on a machine with a GPU: what the tuner's Builder hands its Runner."""
    ptx, launches = emit_ptx(funcs, target)
    path = Path(path)
    path.write_text(json.dumps({"ptx": ptx, "launches": {k: v.to_json() for k, v in launches.items()},
                                "signatures": kernel_signatures(funcs)}))
    return path


def load_cuda_kernel_bundle(path: "str | Path") -> CudaKernelLibrary:
    data = json.loads(Path(path).read_text())
    launches = {k: LaunchConfig(tuple(v["grid"]), tuple(v["block"]), v["shared_bytes"], v.get("dynamic_shared_bytes", 0))
                for k, v in data["launches"].items()}
    return CudaKernelLibrary(data["ptx"], launches, data["signatures"])


def gemm_library(kernels) -> CudaKernelLibrary:
    """A tensor-core GEMM's kernels (core/codegen/mma_gemm.GemmKernels) loaded on this machine's GPU:
    `.call(tuple(kernels.launches), *arrays)` runs the whole GEMM."""
    return CudaKernelLibrary(kernels.ptx, dict(kernels.launches), [kernels.signature(n) for n in kernels.launches])
