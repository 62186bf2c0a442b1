"""What the NVPTX emitters share: the shared-memory address space, a kernel's launch, the target machine (the loop
program's emitter, core/codegen/nvptx.py, and the hand-built tensor-core GEMM, core/codegen/mma_gemm.py)."""
from __future__ import annotations

from dataclasses import dataclass

import llvmlite.binding as llvm

from ..target import Target
from .llvm_env import LLVM_LOCK, initialize_llvm

SHARED = 3  # NVPTX address space of a block's shared memory


@dataclass(frozen=True)
class LaunchConfig:
    """How the host launches one kernel: grid and block dimensions (x, y, z), shared bytes (all of them) and how
    many of those are dynamic (the launch passes them; beyond 48 KiB the kernel must be allowed them first)."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0
    dynamic_shared_bytes: int = 0

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    def to_json(self) -> dict:
        return {"grid": list(self.grid), "block": list(self.block), "shared_bytes": self.shared_bytes,
                "dynamic_shared_bytes": self.dynamic_shared_bytes}



def target_machine(target: Target) -> llvm.TargetMachine:
    with LLVM_LOCK:
        initialize_llvm()
        return llvm.Target.from_triple(target.triple).create_target_machine(cpu=target.cpu, features=target.features,
                                                                            opt=3)
